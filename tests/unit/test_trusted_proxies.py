"""RELAY_TRUSTED_PROXIES (actors/configuration/settings.py) and who the caller is behind a proxy
(web/transport/forwarded.py)."""

from __future__ import annotations

import ipaddress

import pytest

from relay.actors.configuration.settings import ConfigError, Settings
from relay.web.transport.forwarded import TrustedProxies


def proxies(text: str) -> TrustedProxies:
    return TrustedProxies(Settings.from_env({"RELAY_TRUSTED_PROXIES": text}).trusted_proxies)


def test_the_setting_is_comma_separated_cidrs_or_addresses() -> None:
    assert Settings.from_env({}).trusted_proxies == ()
    assert Settings.from_env({"RELAY_TRUSTED_PROXIES": " 10.0.0.0/8, 127.0.0.1 ,fd00::/8,"}).trusted_proxies == (
        ipaddress.ip_network("10.0.0.0/8"), ipaddress.ip_network("127.0.0.1/32"), ipaddress.ip_network("fd00::/8"))
    assert Settings.from_env({"RELAY_TRUSTED_PROXIES": "10.1.2.3/8"}).trusted_proxies == (
        ipaddress.ip_network("10.0.0.0/8"),)  # host bits set: the network, as an operator means it


@pytest.mark.parametrize("bad", ["10.0.0.0/33", "proxy.internal", "10.0.0.0/8,secret-ish-value"])
def test_a_bad_entry_is_refused_by_position_without_its_value(bad: str) -> None:
    with pytest.raises(ConfigError, match=r"RELAY_TRUSTED_PROXIES: entry [12] is not") as refused:
        Settings.from_env({"RELAY_TRUSTED_PROXIES": bad})
    assert bad.split(",")[-1] not in str(refused.value)


def test_without_trusted_proxies_the_peer_is_the_caller() -> None:
    assert TrustedProxies().client("127.0.0.1", "203.0.113.7") == "127.0.0.1"


def test_a_header_from_an_untrusted_peer_changes_nothing() -> None:
    assert proxies("10.0.0.0/8").client("127.0.0.1", "203.0.113.7") == "127.0.0.1"
    assert proxies("10.0.0.0/8").client("192.0.2.1", "10.0.0.5") == "192.0.2.1"


def test_a_trusted_peer_names_the_caller() -> None:
    assert proxies("127.0.0.1/32").client("127.0.0.1", "203.0.113.7") == "203.0.113.7"
    assert proxies("127.0.0.1/32").client("127.0.0.1", None) == "127.0.0.1"
    assert proxies("127.0.0.1/32").client("127.0.0.1", "") == "127.0.0.1"


def test_the_right_most_address_that_is_not_a_trusted_proxy_is_the_caller() -> None:
    chain = proxies("10.0.0.0/8")
    # The client forged 198.51.100.9; its real address was appended by the first proxy, then a second proxy.
    assert chain.client("10.0.0.1", "198.51.100.9, 203.0.113.7, 10.0.0.2") == "203.0.113.7"
    assert chain.client("10.0.0.1", "10.0.0.3,10.0.0.2") == "10.0.0.3"  # all proxies: the left-most
    assert chain.client("10.0.0.1", "not-an-address, 10.0.0.2") == "10.0.0.2"  # garbage: the nearest known hop
    assert chain.client("10.0.0.1", "garbage") == "10.0.0.1"


def test_ports_brackets_and_mapped_addresses() -> None:
    assert proxies("127.0.0.1/32").client("::ffff:127.0.0.1", "203.0.113.7:5123") == "203.0.113.7"
    assert proxies("::1/128").client("::1", "[2001:db8::7]:443") == "2001:db8::7"
    assert proxies("::1/128").client("::1", "2001:db8::7") == "2001:db8::7"
