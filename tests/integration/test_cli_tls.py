"""`relay apps|keys` against a real `relay serve` that speaks TLS (RELAY_TLS_CERT/RELAY_TLS_KEY): the CLI
reaches it over https:// from the same settings, checks its certificate (host name included) and trusts a
custom CA or self-signed certificate only when told to (--cacert, RELAY_CA_FILE; or the server's own
RELAY_TLS_CERT when the URL comes from the same settings); --url/RELAY_URL name the server explicitly. Every
failure exits 2 with one line naming what to set, never a traceback nor the token.

Certificates: a throwaway self-signed one for 127.0.0.1/localhost made here with the openssl CLI, and
tests/integration/test_tls.py's CA-signed one (its helper).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.test_tls import Pki, _openssl
from tests.integration.test_tls import pki as pki  # the CA-signed certificate's fixture, reused
from tests.support.procs import RelayProcess

pytestmark = pytest.mark.integration

ORG = "local"


@pytest.fixture(scope="module")
def self_signed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and localhost (EC P-256, a day), and its key."""
    d = tmp_path_factory.mktemp("self-signed")
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", "relay.key", "-out", "relay.pem", "-days", "1", "-subj", "/CN=127.0.0.1",
             "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost", cwd=d)
    return d / "relay.pem", d / "relay.key"


@pytest.fixture(scope="module", autouse=True)
def _trust_the_certificate(self_signed: tuple[Path, Path]) -> Iterator[None]:
    """The test's own `requests` calls trust it (REQUESTS_CA_BUNDLE), from before `relay` starts to after it stops."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("REQUESTS_CA_BUNDLE", str(self_signed[0]))
        yield


@pytest.fixture(scope="module")
def relay_env(self_signed: tuple[Path, Path]) -> dict[str, str]:
    cert, key = self_signed
    return {"RELAY_TLS_CERT": str(cert), "RELAY_TLS_KEY": str(key)}


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, f"exit {result.returncode}\nstdout: {result.stdout}\nstderr: {result.stderr}"
    assert "Traceback" not in result.stderr
    return result.stdout


def failed(result: subprocess.CompletedProcess[str], *messages: str) -> str:
    assert result.returncode == 2, f"exit {result.returncode}\nstdout: {result.stdout}\nstderr: {result.stderr}"
    for message in messages:
        assert message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""
    return result.stderr


def names(stdout: str) -> set[str]:
    return {line.split("\t")[0] for line in stdout.splitlines() if line}


def test_apps_and_keys_over_https_from_the_servers_own_settings(relay: RelayProcess) -> None:
    """RELAY_TLS_CERT/RELAY_TLS_KEY set as `relay serve` has them: https://, the server's certificate trusted."""
    assert ok(relay.run_cli(["apps", "create", "tls-cli"])).strip() == f"application {ORG}/tls-cli registered"
    assert relay.api("GET", f"/v2/orgs/{ORG}/apps/tls-cli").status_code == 200
    assert "tls-cli" in names(ok(relay.run_cli(["apps", "list"])))

    key = ok(relay.run_cli(["keys", "create", "tls-cli-key", "--app", "tls-cli"])).strip()
    assert key.startswith("dbos_")
    assert "tls-cli-key" in names(ok(relay.run_cli(["keys", "list"])))
    assert ok(relay.run_cli(["keys", "revoke", "tls-cli-key"])).strip() == "API key tls-cli-key revoked"
    assert ok(relay.run_cli(["apps", "delete", "tls-cli"])).strip() == f"application {ORG}/tls-cli deleted"
    assert relay.api("GET", f"/v2/orgs/{ORG}/apps/tls-cli").status_code == 404


def test_url_and_ca_file_from_options_or_environment(relay: RelayProcess, self_signed: tuple[Path, Path],
                                                     pki: Pki) -> None:
    """Without the server's TLS settings (another machine, say): --url/RELAY_URL and --cacert/RELAY_CA_FILE."""
    cert, _ = self_signed
    plain = {"RELAY_TLS_CERT": "", "RELAY_TLS_KEY": ""}
    url = f"https://localhost:{relay.port}"
    assert ok(relay.run_cli(["apps", "create", "tls-opt", "--url", url, "--cacert", str(cert)], plain))
    listed = relay.run_cli(["apps", "list"], {**plain, "RELAY_URL": url + "/", "RELAY_CA_FILE": str(cert)})
    assert "tls-opt" in names(ok(listed))
    # The options win over the environment (whose CA did not sign the server's certificate).
    env = {**plain, "RELAY_URL": "http://127.0.0.1:9", "RELAY_CA_FILE": str(pki.ca)}
    assert "tls-opt" in names(ok(relay.run_cli(["apps", "list", "--url", url, "--cacert", str(cert)], env)))


def test_what_it_refuses_and_how_it_says_so(relay: RelayProcess, pki: Pki, tmp_path: Path) -> None:
    plain = {"RELAY_TLS_CERT": "", "RELAY_TLS_KEY": ""}
    https = f"https://127.0.0.1:{relay.port}"
    # Not trusted: the system CAs alone, or another CA.
    for extra in ([], ["--cacert", str(pki.ca)]):
        stderr = failed(relay.run_cli(["apps", "list", "--url", https, *extra], plain),
                        f"cannot reach relay at {https}", "not trusted", "--cacert or RELAY_CA_FILE")
        assert relay.admin_token not in stderr
    # Plain HTTP to a TLS server: the server drops it; the CLI says where to look.
    failed(relay.run_cli(["apps", "list"], plain), "cannot reach relay at http://127.0.0.1",
           "RELAY_TLS_CERT/RELAY_TLS_KEY", "https:// --url or RELAY_URL")
    # A CA file that is missing or not a certificate; a URL that is not an http(s) base URL.
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    failed(relay.run_cli(["apps", "list", "--url", https, "--cacert", str(tmp_path / "none.pem")], plain),
           "--cacert/RELAY_CA_FILE cannot be used as a CA file")
    failed(relay.run_cli(["apps", "list", "--url", https, "--cacert", str(junk)], plain),
           "--cacert/RELAY_CA_FILE cannot be used as a CA file")
    for bad in ("ftp://127.0.0.1/", "127.0.0.1:8090", f"https://admin:pw@127.0.0.1:{relay.port}"):
        failed(relay.run_cli(["apps", "list", "--url", bad], plain), "--url/RELAY_URL must")


def test_a_ca_signed_certificate(pki: Pki) -> None:
    """test_tls.py's CA-signed certificate: the server's own leaf pinned from its settings, or its CA named."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("REQUESTS_CA_BUNDLE", str(pki.ca))
        with RelayProcess(env={"RELAY_TLS_CERT": str(pki.cert), "RELAY_TLS_KEY": str(pki.key)}) as server:
            assert ok(server.run_cli(["apps", "create", "tls-ca"]))
            plain = {"RELAY_TLS_CERT": "", "RELAY_TLS_KEY": ""}
            url = f"https://localhost:{server.port}"
            assert "tls-ca" in names(ok(server.run_cli(["apps", "list", "--url", url],
                                                       {**plain, "RELAY_CA_FILE": str(pki.ca)})))
            failed(server.run_cli(["apps", "list", "--url", url], plain), "not trusted")


def test_plain_http_servers_are_unchanged(tmp_path: Path) -> None:
    with RelayProcess(tmp_path / "plain") as server:
        assert ok(server.run_cli(["apps", "create", "plain-cli"]))
        assert "plain-cli" in names(ok(server.run_cli(["apps", "list"])))
        failed(server.run_cli(["apps", "list", "--url", f"https://127.0.0.1:{server.port}"]),
               "TLS handshake failed", "does it serve https?")
