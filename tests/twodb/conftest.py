"""The jobs in a database of their own: ``tests/twodb_settings.py`` (``make test`` runs this
folder with those settings on SQLite and on PostgreSQL; the main run does not collect it).

Every test names both databases: pytest-django lets a test use only the aliases it asks for.
"""

from __future__ import annotations

from tests.acceptance.conftest import processes

__all__ = ["processes"]

#: What each test here passes to ``pytest.mark.django_db``.
DATABASES = ["default", "jobs"]
