"""Fashion-MNIST with MNIST as the out-of-distribution set: ``bayesify bench images``
(`command.py`: jobs; `scores.py`, `report.py`, `figures.py`, `laplace.py`) and
``bayesify bench fashion-nodes`` (`fashion_nodes.py`)."""
