"""Post-hoc fitting on validation data, after a method is trained: the regression noise variance
τ⁻¹ (:mod:`~bayesify.posthoc.noise`) and temperature / variance scaling
(:mod:`~bayesify.posthoc.recalibration`)."""
