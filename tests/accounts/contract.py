"""The account store contract (rules 1–7 of ``accounts/store.py``), one suite for every backend.

Subclass ``AccountStoreContract`` with a ``store`` fixture; ``test_store_contract.py`` does so
for the in-memory and the PostgreSQL store.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

import accounts.postgres_store
import accounts.store
from accounts.errors import InvalidAccount, LastOwner, TokenNotFound, UserExists, UserNotFound
from accounts.model import Principal, Revocation, hash_token
from accounts.store import AccountStore

TEN_MINUTES = timedelta(seconds=600)


class AccountStoreContract:
    @pytest.fixture
    def store(self) -> AccountStore:
        raise NotImplementedError("a backend's test class provides the store")

    async def owner_and_member(self, store: AccountStore) -> None:
        await store.add_user("acme", "olga", role="owner")
        await store.add_user("acme", "max", role="member")

    # ------------------------------------------------------------------ users, memberships

    async def test_users_belong_to_a_tenant_with_one_role(self, store: AccountStore) -> None:
        await self.owner_and_member(store)
        listed = await store.list_users("acme")
        assert [(m.user, m.role, m.disabled) for m in listed] == [
            ("olga", "owner", False),
            ("max", "member", False),
        ]
        assert await store.list_users("globex") == []
        with pytest.raises(UserExists):
            await store.add_user("acme", "max", role="admin")
        # The same user id in another tenant is another account.
        other = await store.add_user("globex", "max", role="owner")
        assert other.role == "owner"
        member = await store.membership("acme", "max")
        assert member is not None and member.role == "member"

    async def test_bad_ids_and_roles_are_refused(self, store: AccountStore) -> None:
        with pytest.raises(InvalidAccount):
            await store.add_user("acme", "bad user", role="member")
        with pytest.raises(InvalidAccount):
            await store.add_user("", "max", role="member")
        with pytest.raises(InvalidAccount):
            await store.add_user("acme", "max", role="root")  # type: ignore[arg-type]

    async def test_the_last_enabled_owner_cannot_be_demoted_or_disabled(
        self, store: AccountStore
    ) -> None:
        await self.owner_and_member(store)
        with pytest.raises(LastOwner):
            await store.set_role("acme", "olga", "admin")
        with pytest.raises(LastOwner):
            await store.disable_user("acme", "olga")
        await store.set_role("acme", "max", "owner")
        demoted = await store.set_role("acme", "olga", "member")
        assert demoted.role == "member"
        with pytest.raises(UserNotFound):
            await store.set_role("acme", "nobody", "member")
        with pytest.raises(UserNotFound):
            await store.disable_user("globex", "max")

    # ------------------------------------------------------------------ tokens

    async def test_a_token_is_kept_only_as_a_hash_and_authenticates(
        self, store: AccountStore
    ) -> None:
        await self.owner_and_member(store)
        issued = await store.issue_token("acme", "max", name="laptop")
        assert issued.secret.startswith("ort_") and len(issued.secret) > 40
        assert issued.secret not in repr(issued)
        who = await store.authenticate(issued.secret)
        assert who == Principal("acme", "max")
        assert who is not None and who.role == "member" and who.token_id == issued.info.id
        assert who.scopes == frozenset({"api"})
        assert await store.authenticate(hash_token(issued.secret)) is None
        assert await store.authenticate("ort_not-a-token") is None
        listed = await store.list_tokens("acme", "max")
        assert [(t.id, t.name) for t in listed] == [(issued.info.id, "laptop")]
        assert listed[0].last_used_at is not None

    async def test_a_second_token_and_user_can_be_made(self, store: AccountStore) -> None:
        await self.owner_and_member(store)
        first = await store.issue_token("acme", "max", name="one")
        second = await store.issue_token("acme", "max", name="two", scopes=("metrics",))
        third = await store.issue_token("acme", "olga", name="olga's")
        assert len({first.secret, second.secret, third.secret}) == 3
        metrics = await store.authenticate(second.secret)
        assert metrics is not None and metrics.scopes == frozenset({"metrics"})
        assert [t.name for t in await store.list_tokens("acme")] == ["one", "two", "olga's"]
        assert [t.name for t in await store.list_tokens("acme", "olga")] == ["olga's"]

    async def test_revoked_tokens_stop_at_once_and_are_announced(self, store: AccountStore) -> None:
        await self.owner_and_member(store)
        heard: list[Revocation] = []
        await store.watch(heard.append)
        keep = await store.issue_token("acme", "max", name="keep")
        drop = await store.issue_token("acme", "max", name="drop")
        revoked = await store.revoke_token("acme", drop.info.id)
        assert revoked.revoked_at is not None and not revoked.active(datetime.now(UTC))
        assert await store.authenticate(drop.secret) is None
        assert await store.authenticate(keep.secret) is not None
        for _ in range(200):  # PostgreSQL notifications arrive after the commit
            if heard:
                break
            await asyncio.sleep(0.01)
        assert heard == [Revocation("acme", "max", drop.info.id)]
        assert heard[0].covers(Principal("acme", "max", token_id=drop.info.id))
        assert not heard[0].covers(Principal("acme", "max", token_id=keep.info.id))

    async def test_tokens_of_another_tenant_are_not_found(self, store: AccountStore) -> None:
        await self.owner_and_member(store)
        issued = await store.issue_token("acme", "max", name="t")
        assert await store.get_token("globex", issued.info.id) is None
        with pytest.raises(TokenNotFound):
            await store.revoke_token("globex", issued.info.id)
        assert await store.authenticate(issued.secret) is not None
        found = await store.lookup_token(issued.info.id)
        assert found is not None and found.tenant == "acme"

    async def test_expired_tokens_do_not_authenticate(self, store: AccountStore) -> None:
        await self.owner_and_member(store)
        with pytest.raises(InvalidAccount):
            await store.issue_token(
                "acme", "max", name="t", expires_at=datetime.now(UTC) - timedelta(seconds=1)
            )
        soon = await store.issue_token(
            "acme", "max", name="t", expires_at=datetime.now(UTC) + timedelta(seconds=0.3)
        )
        assert await store.authenticate(soon.secret) is not None
        await asyncio.sleep(0.4)
        assert await store.authenticate(soon.secret) is None

    async def test_disabling_a_user_stops_every_token_of_theirs(self, store: AccountStore) -> None:
        await self.owner_and_member(store)
        heard: list[Revocation] = []
        await store.watch(heard.append)
        token = await store.issue_token("acme", "max", name="t")
        disabled = await store.disable_user("acme", "max")
        assert disabled.disabled
        assert await store.authenticate(token.secret) is None
        with pytest.raises(InvalidAccount):
            await store.issue_token("acme", "max", name="again")
        for _ in range(200):
            if heard:
                break
            await asyncio.sleep(0.01)
        assert heard == [Revocation("acme", "max")]

    async def test_tokens_need_a_membership_and_valid_fields(self, store: AccountStore) -> None:
        await self.owner_and_member(store)
        with pytest.raises(UserNotFound):
            await store.issue_token("acme", "nobody", name="t")
        with pytest.raises(InvalidAccount):
            await store.issue_token("acme", "max", name="   ")
        with pytest.raises(InvalidAccount):
            await store.issue_token("acme", "max", name="t", scopes=("root",))

    async def test_add_token_makes_the_membership_once(self, store: AccountStore) -> None:
        await store.add_token(Principal("acme", "olga", role="owner"), "fixed-secret")
        await store.add_token(Principal("acme", "olga", role="owner"), "fixed-secret")
        who = await store.authenticate("fixed-secret")
        assert who is not None and who.role == "owner"
        assert len(await store.list_tokens("acme", "olga")) == 1

    # ------------------------------------------------------------------ client secrets (rule 7)

    async def minting(self, store: AccountStore, user: str = "max") -> tuple[str, Principal]:
        """A token of ``user`` in acme and the principal it proves (who mints secrets)."""
        issued = await store.issue_token("acme", user, name="backend")
        who = await store.authenticate(issued.secret)
        assert who is not None
        return issued.info.id, who

    async def test_a_client_secret_is_kept_only_as_a_hash_and_binds_its_role(
        self, store: AccountStore
    ) -> None:
        await self.owner_and_member(store)
        token_id, max_ = await self.minting(store)
        issued = await store.issue_client_secret(max_, role_id="role_tutor", ttl=TEN_MINUTES)
        assert issued.secret.startswith("ek_") and len(issued.secret) > 40
        assert issued.secret not in repr(issued)
        info = issued.info
        assert (info.tenant, info.user, info.role_id, info.token_id) == (
            "acme", "max", "role_tutor", token_id,
        )  # fmt: skip
        assert info.id.startswith("cs_")
        assert abs((info.expires_at - info.created_at) - TEN_MINUTES) < timedelta(seconds=1)
        for _ in range(2):  # reusable until it expires
            who = await store.authenticate_client_secret(issued.secret)
            assert who == Principal("acme", "max")
            assert who is not None and who.bound_role_id == "role_tutor"
            assert who.is_client_secret and who.role == "member" and who.token_id == token_id
            assert who.scopes == frozenset()
            assert who.may_use_role("role_tutor") and not who.may_use_role("role_other")
        # A client secret is not a token, nor a token a client secret.
        assert await store.authenticate(issued.secret) is None
        assert await store.authenticate_client_secret(hash_token(issued.secret)) is None
        assert await store.authenticate_client_secret("ek_not-a-secret") is None
        token = await store.issue_token("acme", "max", name="t")
        assert await store.authenticate_client_secret(token.secret) is None
        assert [t.name for t in await store.list_tokens("acme", "max")] == ["backend", "t"]

    async def test_a_client_secret_needs_a_token_an_enabled_member_and_a_bounded_life(
        self, store: AccountStore
    ) -> None:
        await self.owner_and_member(store)
        token_id, max_ = await self.minting(store)
        issued = await store.issue_client_secret(max_, role_id="role_a", ttl=TEN_MINUTES)
        bound = await store.authenticate_client_secret(issued.secret)
        assert bound is not None
        with pytest.raises(InvalidAccount):  # a client secret mints no further secrets
            await store.issue_client_secret(bound, role_id="role_a", ttl=TEN_MINUTES)
        with pytest.raises(InvalidAccount):  # minted by a token only
            await store.issue_client_secret(
                Principal("acme", "max"), role_id="role_a", ttl=TEN_MINUTES
            )
        with pytest.raises(InvalidAccount):  # another user's token
            await store.issue_client_secret(
                Principal("acme", "olga", role="owner", token_id=token_id),
                role_id="role_a",
                ttl=TEN_MINUTES,
            )
        with pytest.raises(UserNotFound):
            await store.issue_client_secret(
                Principal("acme", "nobody", token_id=token_id), role_id="role_a", ttl=TEN_MINUTES
            )
        for ttl in (timedelta(0), timedelta(seconds=-1), timedelta(seconds=7201)):
            with pytest.raises(InvalidAccount):
                await store.issue_client_secret(max_, role_id="role_a", ttl=ttl)
        with pytest.raises(InvalidAccount):
            await store.issue_client_secret(max_, role_id="", ttl=TEN_MINUTES)
        longest = await store.issue_client_secret(
            max_, role_id="role_a", ttl=timedelta(seconds=7200)
        )
        assert await store.authenticate_client_secret(longest.secret) is not None

    async def test_an_expired_client_secret_is_refused(self, store: AccountStore) -> None:
        await self.owner_and_member(store)
        _, max_ = await self.minting(store)
        soon = await store.issue_client_secret(max_, role_id="role_a", ttl=timedelta(seconds=0.3))
        assert await store.authenticate_client_secret(soon.secret) is not None
        await asyncio.sleep(0.4)
        assert await store.authenticate_client_secret(soon.secret) is None

    async def test_client_secrets_stop_with_their_user_and_their_token(
        self, store: AccountStore
    ) -> None:
        await self.owner_and_member(store)
        kept_id, max_ = await self.minting(store)
        dropped_id, max_too = await self.minting(store)
        kept = await store.issue_client_secret(max_, role_id="role_a", ttl=TEN_MINUTES)
        dropped = await store.issue_client_secret(max_too, role_id="role_a", ttl=TEN_MINUTES)
        who = await store.authenticate_client_secret(dropped.secret)
        assert who is not None
        # The minting token's revocation covers the sessions the secret opened.
        assert Revocation("acme", "max", dropped_id).covers(who)
        assert not Revocation("acme", "max", kept_id).covers(who)
        await store.revoke_token("acme", dropped_id)
        assert await store.authenticate_client_secret(dropped.secret) is None
        assert await store.authenticate_client_secret(kept.secret) is not None
        with pytest.raises(InvalidAccount):  # a revoked token mints nothing
            await store.issue_client_secret(max_too, role_id="role_a", ttl=TEN_MINUTES)
        await store.disable_user("acme", "max")
        assert await store.authenticate_client_secret(kept.secret) is None
        with pytest.raises(InvalidAccount):
            await store.issue_client_secret(max_, role_id="role_a", ttl=TEN_MINUTES)

    async def test_live_client_secrets_per_user_are_bounded_and_expired_ones_make_room(
        self, store: AccountStore, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        for module in (accounts.store, accounts.postgres_store):
            monkeypatch.setattr(module, "MAX_LIVE_CLIENT_SECRETS_PER_USER", 2)
        await self.owner_and_member(store)
        _, max_ = await self.minting(store)
        _, olga = await self.minting(store, "olga")
        short = timedelta(seconds=0.3)
        for _ in range(2):
            await store.issue_client_secret(max_, role_id="role_a", ttl=short)
        with pytest.raises(InvalidAccount):
            await store.issue_client_secret(max_, role_id="role_a", ttl=TEN_MINUTES)
        await store.issue_client_secret(olga, role_id="role_a", ttl=TEN_MINUTES)  # per user
        await asyncio.sleep(0.4)
        again = await store.issue_client_secret(max_, role_id="role_a", ttl=TEN_MINUTES)
        assert await store.authenticate_client_secret(again.secret) is not None
