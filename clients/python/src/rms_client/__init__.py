"""Python client of the RMS feedback service (CLIENT.md is its fixed surface)."""

from rms_client._version import __version__
from rms_client.client import AsyncRMSClient, RMSClient
from rms_client.errors import RMSError, RMSValidationError
from rms_client.mirror import Mirror
from rms_client.recorder import Interaction, Recorder
from rms_client.webhooks import sign_webhook, verify_webhook

__all__ = [
    "AsyncRMSClient",
    "Interaction",
    "Mirror",
    "RMSClient",
    "RMSError",
    "RMSValidationError",
    "Recorder",
    "__version__",
    "sign_webhook",
    "verify_webhook",
]
