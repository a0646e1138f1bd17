"""The User aggregate: a person known to Relay, registered once with a token of their identity provider.

Its id comes from the issuer and the subject of that token (events/ids.py `user_id`), so every instance finds the
same person from a token alone. Which organization they belong to, and with which role, is the organization's
business (events/access.py). Pure: `at` comes in.
"""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from eventsourcing.domain import Aggregate, event

from relay.events.errors import InvalidValueError
from relay.events.ids import user_id
from relay.events.names import check_user_name
from relay.events.versions import versioned

MAX_PROFILE_CHARS = 200  # given name, family name, company
MAX_EMAIL_CHARS = 254


def normal_email(email: str | None) -> str:
    """An e-mail as Relay keeps and compares it (lower-cased); InvalidValueError when there is none."""
    text = (email or "").strip().lower()
    if not text or len(text) > MAX_EMAIL_CHARS or text.count("@") != 1 or text.startswith("@") or text.endswith("@"):
        raise InvalidValueError("the identity provider's token carries no usable e-mail address (claim 'email')")
    return text


def email_domain(email: str) -> str:
    return email.rsplit("@", 1)[1]


def _profile_text(value: str, what: str) -> str:
    if not isinstance(value, str) or len(value) > MAX_PROFILE_CHARS:
        raise InvalidValueError(f"{what} must be text of at most {MAX_PROFILE_CHARS} characters")
    return value.strip()


@versioned({"Registered": 1})
class User(Aggregate):
    """A registered person. ``email`` is lower-cased: keys they create record it as their creator (``by``)."""

    @staticmethod
    def create_id(username: str, email: str, issuer: str, subject: str, given_name: str, family_name: str,
                  company: str, at: datetime) -> UUID:
        return user_id(issuer, subject)

    @event("Registered")
    def __init__(self, username: str, email: str, issuer: str, subject: str, given_name: str, family_name: str,
                 company: str, at: datetime) -> None:
        self.username = username
        self.email = email
        self.issuer = issuer
        self.subject = subject
        self.given_name = given_name
        self.family_name = family_name
        self.company = company
        self.registered_at = at

    @classmethod
    def register(cls, username: str, email: str | None, issuer: str, subject: str, at: datetime, *,
                 given_name: str = "", family_name: str = "", company: str = "") -> User:
        if not issuer or not subject:
            raise InvalidValueError("a person is registered from a token with an issuer and a subject")
        return cls(username=check_user_name(username), email=normal_email(email), issuer=issuer, subject=subject,
                   given_name=_profile_text(given_name, "givenName"),
                   family_name=_profile_text(family_name, "familyName"),
                   company=_profile_text(company, "company"), at=at)
