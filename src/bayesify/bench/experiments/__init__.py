"""One-off experiments behind ``bayesify bench <name>``: each reproduces one figure or claim of a
paper on real data and writes a markdown report. Not part of the library's API."""
