"""GKE's Managed Service for Prometheus as a stack's monitoring meets it: where its alerts
can be sent. Beside ``catalog.gke`` (machine types and GPUs), which ``PROFILE`` closes.
"""

from __future__ import annotations

import re

from spotproof.catalog.profile import ManagedPrometheus

MANAGED_PROMETHEUS = ManagedPrometheus(
    # A Cloud Monitoring notification channel's name, ``projects/[PROJECT_ID]/
    # notificationChannels/[CHANNEL_ID]`` (``NotificationChannelService.
    # GetNotificationChannel``, Cloud Monitoring v3 client reference).
    notify_target=re.compile(
        r"projects/[a-z0-9][-a-z0-9.:]{4,61}[a-z0-9]/notificationChannels/[0-9]{1,30}"
    ),
    notify_target_form=(
        "a Cloud Monitoring notification channel, projects/PROJECT/notificationChannels/ID"
    ),
    # No floor of its own is known: PodMonitoring is rendered at the stack's interval.
    scrape_floor=None,
)
"""What GKE's profile says of its managed Prometheus (``catalog.profile``)."""
