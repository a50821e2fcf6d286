"""UCI regression: ``bayesify bench uci`` (`command.py`) under Gal's protocol (`gal.py`,
`gal_methods.py`), Gal's 2018 preset and results (`gal2018_protocol.py`, `gal2018_results.py`,
`gal2018_page.py`, `gal2018_sections.py`) or Teye et al.'s (`teye.py`, `teye_cv.py`,
`teye_report.py`); its jobs, rows, recovery of a killed run, page and figures."""
