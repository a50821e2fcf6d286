"""Serving under load: ``bayesify bench serve`` (`command.py`), its closed-loop load generator
(`http_load.py`) and the slow-header siege (`slow_clients.py`)."""
