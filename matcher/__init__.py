"""The matcher: submission, SubmitPools, the Celery control plane and the operator views."""
