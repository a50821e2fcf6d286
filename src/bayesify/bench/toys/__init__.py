"""Small reproductions, one command each: ``bn-noise``, ``noise-toy``, ``toy-depth``,
``mcbn-collapse`` and ``coverage``."""
