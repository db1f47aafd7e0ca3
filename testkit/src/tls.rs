//! Certificates made fresh for each test run: a private CA, a server
//! certificate for `127.0.0.1` and `localhost` and a client certificate,
//! both signed by that CA, and a second CA that signed neither (for "wrong
//! CA" tests). Written as PEM files to a temporary folder that lives as long
//! as any clone of the [`TestPki`] (nodes started with it keep one).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};

/// A private CA with one server and one client certificate, as PEM files.
#[derive(Clone, Debug)]
pub struct TestPki {
    dir: Arc<tempfile::TempDir>,
}

/// The file names inside the folder.
const CA_CERT: &str = "ca.crt";
const OTHER_CA_CERT: &str = "other-ca.crt";
const SERVER_CERT: &str = "server.crt";
const SERVER_KEY: &str = "server.key";
const CLIENT_CERT: &str = "client.crt";
const CLIENT_KEY: &str = "client.key";

fn ca(name: &str) -> CertifiedIssuer<'static, KeyPair> {
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let key = KeyPair::generate().expect("CA key");
    CertifiedIssuer::self_signed(params, key).expect("self-signed CA certificate")
}

/// A certificate signed by `issuer`: (certificate PEM, key PEM).
fn leaf(
    issuer: &CertifiedIssuer<'static, KeyPair>,
    name: &str,
    alt_names: &[&str],
    usage: ExtendedKeyUsagePurpose,
) -> (String, String) {
    let alt_names: Vec<String> = alt_names.iter().map(|s| s.to_string()).collect();
    let mut params = CertificateParams::new(alt_names).expect("certificate parameters");
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![usage];
    let key = KeyPair::generate().expect("key");
    let cert = params.signed_by(&key, issuer).expect("signed certificate");
    (cert.pem(), key.serialize_pem())
}

impl TestPki {
    /// Generates the CAs and certificates and writes them out.
    pub fn generate() -> TestPki {
        let dir = tempfile::Builder::new()
            .prefix("redlock-pki-")
            .tempdir()
            .expect("temp dir");
        let ca = ca("redlock test CA");
        let other = ca_of_nothing();
        let (server_cert, server_key) = leaf(
            &ca,
            "redlock test server",
            &["127.0.0.1", "localhost"],
            ExtendedKeyUsagePurpose::ServerAuth,
        );
        let (client_cert, client_key) = leaf(
            &ca,
            "redlock test client",
            &[],
            ExtendedKeyUsagePurpose::ClientAuth,
        );
        for (name, pem) in [
            (CA_CERT, ca.pem()),
            (OTHER_CA_CERT, other),
            (SERVER_CERT, server_cert),
            (SERVER_KEY, server_key),
            (CLIENT_CERT, client_cert),
            (CLIENT_KEY, client_key),
        ] {
            std::fs::write(dir.path().join(name), pem).expect("write a PEM file");
        }
        TestPki { dir: Arc::new(dir) }
    }

    /// The folder holding the files.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The CA certificate that signed the server and client certificates.
    pub fn ca_cert(&self) -> PathBuf {
        self.dir().join(CA_CERT)
    }

    /// A CA certificate that signed nothing here: trusting only it, a client
    /// cannot verify the nodes.
    pub fn other_ca_cert(&self) -> PathBuf {
        self.dir().join(OTHER_CA_CERT)
    }

    /// The nodes' certificate (for `127.0.0.1` and `localhost`).
    pub fn server_cert(&self) -> PathBuf {
        self.dir().join(SERVER_CERT)
    }

    /// The nodes' private key.
    pub fn server_key(&self) -> PathBuf {
        self.dir().join(SERVER_KEY)
    }

    /// A client certificate the nodes accept (`tls-auth-clients yes`).
    pub fn client_cert(&self) -> PathBuf {
        self.dir().join(CLIENT_CERT)
    }

    /// The client certificate's private key.
    pub fn client_key(&self) -> PathBuf {
        self.dir().join(CLIENT_KEY)
    }
}

/// The PEM of a second, unrelated CA.
fn ca_of_nothing() -> String {
    ca("unrelated test CA").pem()
}
