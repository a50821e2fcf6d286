"""One pass against the loop of T passes, memory and training time: ``bayesify bench speed``
(`command.py`; the cases it times, `cases.py`)."""
