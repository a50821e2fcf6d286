"""Each method's predictive against an HMC reference posterior: ``bayesify bench posterior``
(`command.py`; `problems.py`, `jobs.py`, `report.py`) and the flow posterior against exact
posteriors, ``bayesify bench flow-banana`` (`flow_banana.py`)."""
