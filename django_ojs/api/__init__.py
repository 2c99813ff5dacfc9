"""The OJS HTTP binding on Django REST framework (``/ojs/manifest`` and ``/ojs/v1/...``)."""
