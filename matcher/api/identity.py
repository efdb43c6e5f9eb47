"""Who is calling: the user, its groups and its role, as a credential established them."""

from __future__ import annotations

from dataclasses import dataclass

#: Roles, weakest first (the same as the issued tokens': taskqueues.store.tokens.ROLES).
USER, GROUP_ADMIN, OPERATOR = "user", "group-admin", "operator"


@dataclass(frozen=True)
class Identity:
    """A caller the API has authenticated; ``via`` says by what (``token <id>``, ``jwt <issuer>``)."""

    user: str
    groups: tuple[str, ...]
    role: str
    via: str

    @property
    def operator(self) -> bool:
        return self.role == OPERATOR

    def to_json(self) -> dict[str, object]:
        return {"user": self.user, "groups": list(self.groups), "role": self.role, "via": self.via}
