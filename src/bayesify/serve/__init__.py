"""The prediction server (FastAPI on uvicorn): ``bayesify serve BUNDLE``.

See :mod:`bayesify.serve.app` for the endpoints, :mod:`.batching` for micro-batching,
:mod:`.monitor` for calibration in production (:mod:`.figures` scores outcomes,
:mod:`.drift` compares with baselines, :mod:`.metrics` exports to Prometheus) and
:mod:`.v2` for the Open Inference Protocol.
Nothing is imported here, so ``import bayesify.serve`` stays cheap.
"""
