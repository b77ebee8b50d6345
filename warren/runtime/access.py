"""Who may log in, and where: users, their tags and passwords, permissions, vhost metadata.

Theory of operation:
1. A `User` keeps a password hash in RabbitMQ's definitions format
   (``rabbit_password_hashing_sha256``: base64 of a 4-byte random salt followed by
   sha256(salt ++ password)), never the password. `authenticate` recomputes the digest
   with the stored salt and compares in constant time. A user without a hash (RabbitMQ's
   ``password_hash: ""``) cannot log in with a password.
2. Tags are RabbitMQ's: ``administrator``, ``monitoring``, ``policymaker``,
   ``management``, or anything else (which grants nothing). `warren.mgmt` decides what a
   tag allows; this module only keeps them.
3. A permission is three regular expressions (configure, write, read) per user and vhost.
   Having one is what "may use the vhost" means (connection.open, the HTTP API for
   management users); channels check the expressions on every declare, delete, bind,
   publish, consume, get and purge through `permission_check` (`warren.model.permissions`
   says which operation needs what).
4. Vhost metadata (description, tags, default queue type) sits beside the model's `VHost`,
   which knows nothing of it.
5. Pure bookkeeping: persistence is the caller's (`warren.runtime.admin_access` writes the
   definitions store before it changes anything here).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass, field

from warren.model.permissions import PermissionCheck

HASHING_ALGORITHM = "rabbit_password_hashing_sha256"
SALT_BYTES = 4
FULL_ACCESS = ".*"


def hash_password(password: str, salt: bytes | None = None) -> str:
    """rabbit_password_hashing_sha256: base64(salt ++ sha256(salt ++ password))."""
    salt = secrets.token_bytes(SALT_BYTES) if salt is None else salt
    digest = hashlib.sha256(salt + password.encode("utf-8")).digest()
    return base64.b64encode(salt + digest).decode("ascii")


def check_password(password: str, password_hash: str) -> bool:
    try:
        raw = base64.b64decode(password_hash, validate=True)
    except ValueError:
        return False
    if len(raw) != SALT_BYTES + hashlib.sha256().digest_size:
        return False
    expected = hash_password(password, raw[:SALT_BYTES])
    return hmac.compare_digest(expected, password_hash)


@dataclass(frozen=True, slots=True)
class User:
    name: str
    password_hash: str
    tags: tuple[str, ...] = ()
    hashing_algorithm: str = HASHING_ALGORITHM


@dataclass(frozen=True, slots=True)
class Permission:
    user: str
    vhost: str
    configure: str = FULL_ACCESS
    write: str = FULL_ACCESS
    read: str = FULL_ACCESS


def permission_check(permission: Permission | None, user: str, vhost: str) -> PermissionCheck:
    """The check for `permission` (None: the user may use nothing in the vhost)."""
    if permission is None:
        return PermissionCheck(user, vhost, "", "", "")
    return PermissionCheck(user, vhost, permission.configure, permission.write, permission.read)


@dataclass(frozen=True, slots=True)
class VHostInfo:
    name: str
    description: str = ""
    tags: tuple[str, ...] = ()
    default_queue_type: str | None = None


@dataclass
class Access:
    users: dict[str, User] = field(default_factory=dict)
    permissions: dict[tuple[str, str], Permission] = field(default_factory=dict)
    vhosts: dict[str, VHostInfo] = field(default_factory=dict)

    @classmethod
    def with_default(cls, user: str, password: str) -> Access:
        """A node's first start: the default user, an administrator with full access to
        the default vhost (RabbitMQ's default_user, default_user_tags, default_permissions)."""
        access = cls()
        access.users[user] = User(user, hash_password(password), ("administrator",))
        access.permissions[user, "/"] = Permission(user, "/")
        access.vhosts["/"] = VHostInfo("/", "Default virtual host")
        return access

    def authenticate(self, name: str, password: str) -> User | None:
        user = self.users.get(name)
        if user is None or not user.password_hash:
            return None
        return user if check_password(password, user.password_hash) else None

    def permission(self, user: str, vhost: str) -> Permission | None:
        return self.permissions.get((user, vhost))

    def forget_user(self, name: str) -> None:
        self.users.pop(name, None)
        for key in [key for key in self.permissions if key[0] == name]:
            del self.permissions[key]

    def forget_vhost(self, name: str) -> None:
        self.vhosts.pop(name, None)
        for key in [key for key in self.permissions if key[1] == name]:
            del self.permissions[key]
