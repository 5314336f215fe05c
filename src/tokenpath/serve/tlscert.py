"""A self-signed certificate made per run (cryptography), for proxies that terminate TLS in an experiment, and the
files it is written to (TLSFiles: what a proxy's config names and a relay serves with)."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@dataclass(frozen=True, slots=True)
class TLSFiles:
    cert: Path
    key: Path
    combined: Path  # cert + key in one PEM (HAProxy's `crt`)


def self_signed(directory: Path, addresses: list[str]) -> TLSFiles:
    """A CA-flagged P-256 certificate valid for an hour for these IP addresses; cert, key and both combined."""
    directory.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "tokenpath test")])
    now = datetime.datetime.now(datetime.UTC)
    san = x509.SubjectAlternativeName(
        [x509.IPAddress(ipaddress.ip_address(a)) for a in addresses] + [x509.DNSName("localhost")]
    )
    builder = x509.CertificateBuilder(
        issuer_name=name,
        subject_name=name,
        public_key=key.public_key(),
        serial_number=x509.random_serial_number(),
        not_valid_before=now - datetime.timedelta(minutes=5),
        not_valid_after=now + datetime.timedelta(hours=1),
    )
    builder = builder.add_extension(san, critical=False)
    builder = builder.add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
    cert = builder.sign(key, hashes.SHA256())
    cert_pem = cert.public_bytes(serialization.Encoding.PEM)
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    files = TLSFiles(directory / "cert.pem", directory / "key.pem", directory / "combined.pem")
    files.cert.write_bytes(cert_pem)
    files.key.write_bytes(key_pem)
    files.combined.write_bytes(cert_pem + key_pem)
    files.key.chmod(0o600)
    files.combined.chmod(0o600)
    return files
