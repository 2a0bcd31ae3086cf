"""A throwaway certificate authority for the tests' TLS servers (Redis, Kafka), made at test time
with `cryptography` (no key or certificate is ever in the repository): a CA, a server certificate
for 127.0.0.1 (only), and a client certificate, each as PEM files in a folder; the server's
key and chain also as a PKCS#12 keystore for the JVM.

    certs = make_certs(tmp_path / "tls")
    certs.ca, certs.server_cert, certs.server_key, certs.client_cert, certs.client_key  # Paths
    certs.keystore, certs.keystore_password                                            # PKCS#12
"""
from __future__ import annotations

import dataclasses
import datetime
import ipaddress
import secrets
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclasses.dataclass
class Certs:
    folder: Path
    keystore_password: str

    def __getattr__(self, name: str) -> Path:
        if name in ("ca", "server_cert", "server_key", "client_cert", "client_key",
                    "other_ca", "keystore"):
            return self.folder / {"keystore": "server.p12"}.get(name, f"{name}.pem")
        raise AttributeError(name)


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _cert(subject: str, key, issuer: str, issuer_key, ca: bool = False, usage=None,
          names=()) -> x509.Certificate:
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (x509.CertificateBuilder().subject_name(_name(subject)).issuer_name(_name(issuer))
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5))
               .not_valid_after(now + datetime.timedelta(days=1))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if ca:
        builder = builder.add_extension(x509.KeyUsage(
            digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
            key_encipherment=False, data_encipherment=False, key_agreement=False,
            encipher_only=False, decipher_only=False), critical=True)
    if usage:
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(list(names)), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def _write(path: Path, cert: x509.Certificate = None, key=None) -> None:
    if cert is not None:
        path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    else:
        path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
        path.chmod(0o600)


def make_certs(folder: Path) -> Certs:
    """A CA, a server and a client certificate signed by it, and a second CA that signed none
    of them (a client trusting only it must refuse the server)."""
    folder.mkdir(parents=True, exist_ok=True)
    certs = Certs(folder, secrets.token_urlsafe(16))
    ca_key, other_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(
        ec.SECP256R1())
    ca = _cert("tests CA", ca_key, "tests CA", ca_key, ca=True)
    other = _cert("another CA", other_key, "another CA", other_key, ca=True)
    server_key, client_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(
        ec.SECP256R1())
    # 127.0.0.1 only: a client reaching it as `localhost` must fail the host name check.
    server = _cert("127.0.0.1", server_key, "tests CA", ca_key, usage=ExtendedKeyUsageOID
                   .SERVER_AUTH, names=(x509.IPAddress(ipaddress.ip_address("127.0.0.1")),))
    client = _cert("tests client", client_key, "tests CA", ca_key,
                   usage=ExtendedKeyUsageOID.CLIENT_AUTH)
    _write(certs.ca, ca)
    _write(certs.other_ca, other)
    _write(certs.server_cert, server)
    _write(certs.server_key, key=server_key)
    _write(certs.client_cert, client)
    _write(certs.client_key, key=client_key)
    certs.keystore.write_bytes(pkcs12.serialize_key_and_certificates(
        b"server", server_key, server, [ca],
        serialization.BestAvailableEncryption(certs.keystore_password.encode())))
    return certs
