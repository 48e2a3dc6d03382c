"""Marks that several test modules share."""

from __future__ import annotations

import pytest

# LiveKit's dev secret is short; the tokens made with it are for the test server only.
DEV_SECRET = pytest.mark.filterwarnings("ignore::jwt.InsecureKeyLengthWarning")

LIVEKIT_INTEGRATION = [pytest.mark.integration, pytest.mark.slow, DEV_SECRET]
"""`pytestmark` of a module whose tests run on a real livekit-server with dev-secret tokens."""
