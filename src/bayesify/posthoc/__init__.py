"""Post-hoc fitting on validation data, after a method is trained: the regression noise variance
τ⁻¹ (:mod:`~bayesify.posthoc.noise`), temperature / variance scaling
(:mod:`~bayesify.posthoc.recalibration`) and conformal calibration with a finite-sample coverage
guarantee (:mod:`~bayesify.posthoc.conformal`)."""
