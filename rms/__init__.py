"""RMS feedback service: the Django project package and the core memory-object domain.

The Celery app lives in ``rms.celery`` (``celery -A rms`` finds it) and is loaded by
``RmsConfig.ready`` rather than here, so the pure modules (policy, replay, evidence) import
without Django.
"""
