"""Server TLS with a CA made here: a client that trusts the CA connects (with its role's
credential), one without it is refused with a message that names the certificate; a client
given a CA or a ``tls://`` URL refuses a server without TLS, and upgrades on one that merely
allows it."""

from __future__ import annotations

import datetime
import ipaddress
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from heddle.bus import Bus, BusUnavailable, EmbeddedNatsServer
from heddle.config import Settings
from heddle.deploy.auth import AUTH_CONFIG_NAME, credential_path, write_auth
from heddle.deploy.roles import Identity

OPERATOR = Identity("operator")


@dataclass(frozen=True)
class Certificates:
    ca: Path
    cert: Path
    key: Path


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def make_certificates(folder: Path) -> Certificates:
    """A self-signed CA and a server certificate it signs for 127.0.0.1 and localhost."""
    folder.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(_name("heddle test CA"))
        .issuer_name(_name("heddle test CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name("nats"))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    paths = Certificates(folder / "ca.pem", folder / "server.pem", folder / "server-key.pem")
    paths.ca.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths.key.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return paths


@dataclass(frozen=True)
class TlsServer:
    server: EmbeddedNatsServer
    certificates: Certificates
    auth_dir: Path


@pytest.fixture
def tls_server(tmp_path: Path) -> Iterator[TlsServer]:
    certificates = make_certificates(tmp_path / "tls")
    auth_dir = tmp_path / "auth"
    write_auth(auth_dir)
    config = (
        f'tls {{ cert_file: "{certificates.cert}", key_file: "{certificates.key}" }}\n'
        + (auth_dir / AUTH_CONFIG_NAME).read_text()
    )
    with EmbeddedNatsServer(tmp_path / "nats", extra_config=config) as server:
        yield TlsServer(server, certificates, auth_dir)


async def test_a_client_with_the_ca_connects(tls_server: TlsServer, tmp_path: Path) -> None:
    settings = Settings(
        nats_url=tls_server.server.url,
        data_dir=tmp_path,
        nats_creds=credential_path(tls_server.auth_dir, OPERATOR),
        nats_tls_ca=tls_server.certificates.ca,
    )
    async with Bus(settings) as bus:
        ack = await bus.publish_raw("heddle.evt.deadletter.operator", b"{}", "probe-1")
        assert ack.sequence == 1
        assert bus.client._server_info.get("tls_required") is True


async def test_a_client_without_the_ca_is_refused(tls_server: TlsServer, tmp_path: Path) -> None:
    settings = Settings(
        nats_url=tls_server.server.url,
        data_dir=tmp_path,
        nats_creds=credential_path(tls_server.auth_dir, OPERATOR),
    )
    with pytest.raises(BusUnavailable, match="certificate"):
        async with Bus(settings):
            pass


def _tls_block(certificates: Certificates, extra: str = "") -> str:
    return f'tls {{ cert_file: "{certificates.cert}", key_file: "{certificates.key}" }}\n{extra}'


async def test_a_client_given_a_ca_refuses_a_plaintext_server(tmp_path: Path) -> None:
    certificates = make_certificates(tmp_path / "tls")
    with EmbeddedNatsServer(tmp_path / "nats") as server:
        settings = Settings(nats_url=server.url, data_dir=tmp_path, nats_tls_ca=certificates.ca)
        with pytest.raises(BusUnavailable, match="plaintext connection is refused"):
            async with Bus(settings):
                pass
        tls_url = Settings(nats_url=server.url.replace("nats://", "tls://"), data_dir=tmp_path)
        with pytest.raises(BusUnavailable, match="plaintext connection is refused"):
            async with Bus(tls_url):
                pass


async def test_a_client_given_a_ca_upgrades_where_tls_is_optional(tmp_path: Path) -> None:
    certificates = make_certificates(tmp_path / "tls")
    config = _tls_block(certificates, "allow_non_tls: true\n")
    with EmbeddedNatsServer(tmp_path / "nats", extra_config=config) as server:
        settings = Settings(nats_url=server.url, data_dir=tmp_path, nats_tls_ca=certificates.ca)
        async with Bus(settings) as bus:
            assert bus.client._transport is not None
            ssl_object = bus.client._transport._io_writer.get_extra_info("ssl_object")
            assert ssl_object is not None, "the connection stayed in plaintext"
            assert (
                await bus.publish_raw("heddle.evt.deadletter.operator", b"{}", "p1")
            ).sequence == 1


async def test_a_tls_connection_closes_without_asyncio_notices(
    tls_server: TlsServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = Settings(
        nats_url=tls_server.server.url,
        data_dir=tmp_path,
        nats_creds=credential_path(tls_server.auth_dir, OPERATOR),
        nats_tls_ca=tls_server.certificates.ca,
    )
    with caplog.at_level(logging.DEBUG):
        for _ in range(3):
            async with Bus(settings) as bus:
                await bus.publish_raw("heddle.evt.deadletter.operator", b"{}", None)
    assert not [r for r in caplog.records if "eof_received" in r.getMessage()]
