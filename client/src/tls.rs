//! TLS settings: the CA that signed the nodes' certificates, and a client
//! certificate and key for mutual TLS (`tls-auth-clients yes`, Redis's
//! default). Certificate verification is always on: there is no switch to
//! turn it off, and `rediss://…#insecure` URLs are refused.

use std::path::{Path, PathBuf};

use crate::core::error::Error;

/// The TLS files given to the builder; read by [`TlsFiles::load`] when the
/// client is built.
#[derive(Clone, Debug, Default)]
pub(crate) struct TlsFiles {
    /// PEM file of the CA certificate(s) the nodes' certificates must chain
    /// to; without it, the operating system's trust store is used.
    pub(crate) ca: Option<PathBuf>,
    /// PEM files of the client certificate (chain) and its private key.
    pub(crate) client: Option<(PathBuf, PathBuf)>,
}

/// The loaded certificates, ready for `redis::Client::build_with_tls`.
#[derive(Clone)]
pub(crate) struct TlsSettings(redis::TlsCertificates);

impl std::fmt::Debug for TlsSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print key material.
        f.debug_struct("TlsSettings")
            .field("custom_ca", &self.0.root_cert.is_some())
            .field("client_certificate", &self.0.client_tls.is_some())
            .finish()
    }
}

impl TlsFiles {
    /// Reads and checks the files; `None` when no TLS file was given.
    /// Every error names the file and what was expected in it.
    pub(crate) fn load(&self) -> Result<Option<TlsSettings>, Error> {
        if self.ca.is_none() && self.client.is_none() {
            return Ok(None);
        }
        let root_cert = match &self.ca {
            Some(path) => Some(read_pem(path, "TLS CA file", &["CERTIFICATE"])?),
            None => None,
        };
        let client_tls = match &self.client {
            Some((cert, key)) => Some(redis::ClientTlsConfig {
                client_cert: read_pem(cert, "TLS client certificate file", &["CERTIFICATE"])?,
                client_key: read_pem(
                    key,
                    "TLS client key file",
                    &["PRIVATE KEY", "RSA PRIVATE KEY", "EC PRIVATE KEY"],
                )?,
            }),
            None => None,
        };
        Ok(Some(TlsSettings(redis::TlsCertificates {
            client_tls,
            root_cert,
        })))
    }
}

/// Reads a PEM file that must hold at least one block with one of `labels`
/// (`-----BEGIN <label>-----`).
fn read_pem(path: &Path, what: &str, labels: &[&str]) -> Result<Vec<u8>, Error> {
    let bytes = std::fs::read(path).map_err(|e| {
        Error::InvalidArgument(format!("cannot read the {what} {}: {e}", path.display()))
    })?;
    let text = String::from_utf8_lossy(&bytes);
    if !labels
        .iter()
        .any(|label| text.contains(&format!("-----BEGIN {label}-----")))
    {
        return Err(Error::InvalidArgument(format!(
            "the {what} {} holds no PEM block of type {}",
            path.display(),
            labels.join(" or ")
        )));
    }
    Ok(bytes)
}

/// Refuses what would weaken TLS through the URL: a fragment (the redis
/// crate reads `#insecure` as "skip certificate verification"), and TLS
/// files with a plain `redis://` URL (the files would be ignored).
pub(crate) fn check_url(url: &str, shown: &str, tls: Option<&TlsSettings>) -> Result<(), Error> {
    if url.contains('#') {
        return Err(Error::InvalidArgument(format!(
            "node URL {shown:?} has a #fragment: none is supported (certificate verification cannot be turned off; give the CA that signed the nodes' certificates instead)"
        )));
    }
    let is_tls = url
        .get(..9)
        .is_some_and(|scheme| scheme.eq_ignore_ascii_case("rediss://"));
    if tls.is_some() && !is_tls {
        return Err(Error::InvalidArgument(format!(
            "node URL {shown:?} is not a TLS URL but TLS files were given: write rediss://host:port"
        )));
    }
    Ok(())
}

/// The client for one node URL, with the TLS settings when given.
pub(crate) fn client(url: &str, tls: Option<&TlsSettings>) -> redis::RedisResult<redis::Client> {
    match tls {
        None => redis::Client::open(url),
        Some(settings) => redis::Client::build_with_tls(url, settings.0.clone()),
    }
}

/// The client for a parsed connection (a cluster node found through a
/// redirect), with the TLS settings when given.
pub(crate) fn client_for(
    info: redis::ConnectionInfo,
    tls: Option<&TlsSettings>,
) -> redis::RedisResult<redis::Client> {
    match tls {
        None => redis::Client::open(info),
        Some(settings) => redis::Client::build_with_tls(info, settings.0.clone()),
    }
}

impl TlsSettings {
    /// The certificates, for a cluster client.
    pub(crate) fn certificates(&self) -> redis::TlsCertificates {
        self.0.clone()
    }
}

/// A connection failure in words that say what to do: TLS handshake
/// problems (no client certificate, an unknown CA, a name mismatch) and
/// failed authentication. Other errors keep the redis crate's text.
pub(crate) fn describe_connect_error(err: &redis::RedisError) -> String {
    let text = err.to_string();
    if err.kind() == redis::ErrorKind::AuthenticationFailed
        || text.contains("WRONGPASS")
        || text.contains("invalid password")
    {
        return format!(
            "authentication failed: wrong user name or password, or the user is disabled ({})",
            err.detail().unwrap_or("the server refused AUTH")
        );
    }
    if text.contains("NOAUTH") {
        return "authentication failed: the server requires a password: put it in the URL (redis://user:password@host:port)".to_string();
    }
    if text.contains("CertificateRequired") || text.contains("certificate required") {
        return format!(
            "TLS: the server requires a client certificate (tls-auth-clients): give a certificate and key signed by the CA the server trusts ({text})"
        );
    }
    if text.contains("UnknownIssuer") {
        return format!(
            "TLS: the server's certificate is signed by a CA that is not trusted: give the CA that signed it ({text})"
        );
    }
    if text.contains("NotValidForName") {
        return format!(
            "TLS: the server's certificate is not valid for this host name: connect with a name or address it lists ({text})"
        );
    }
    if text.contains("invalid peer certificate") {
        return format!("TLS: the server's certificate was refused ({text})");
    }
    if text.contains("received fatal alert") {
        return format!("TLS: the server ended the handshake ({text})");
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_and_wrong_files_are_named() {
        let files = TlsFiles {
            ca: Some(PathBuf::from("/nonexistent/ca.crt")),
            client: None,
        };
        let text = files.load().unwrap_err().to_string();
        assert!(
            text.contains("cannot read the TLS CA file /nonexistent/ca.crt"),
            "{text}"
        );

        let dir = std::env::temp_dir().join(format!("redlock-tls-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let not_pem = dir.join("ca.txt");
        std::fs::write(&not_pem, "hello").unwrap();
        let files = TlsFiles {
            ca: Some(not_pem.clone()),
            client: None,
        };
        let text = files.load().unwrap_err().to_string();
        assert!(text.contains(&not_pem.display().to_string()), "{text}");
        assert!(text.contains("no PEM block of type CERTIFICATE"), "{text}");

        let cert = dir.join("client.crt");
        std::fs::write(&cert, "-----BEGIN CERTIFICATE-----\n").unwrap();
        let files = TlsFiles {
            ca: None,
            client: Some((cert.clone(), cert.clone())),
        };
        let text = files.load().unwrap_err().to_string();
        assert!(
            text.contains(&format!("TLS client key file {}", cert.display())),
            "{text}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn insecure_fragments_and_plain_urls_with_tls_files_are_refused() {
        let text = check_url("rediss://h:1/#insecure", "rediss://h:1/#insecure", None)
            .unwrap_err()
            .to_string();
        assert!(text.contains("cannot be turned off"), "{text}");
        let settings = TlsSettings(redis::TlsCertificates {
            client_tls: None,
            root_cert: None,
        });
        let text = check_url("redis://h:1", "redis://h:1", Some(&settings))
            .unwrap_err()
            .to_string();
        assert!(text.contains("write rediss://"), "{text}");
        assert!(check_url("rediss://h:1", "rediss://h:1", Some(&settings)).is_ok());
        assert!(check_url("REDISS://h:1", "REDISS://h:1", Some(&settings)).is_ok());
        assert!(check_url("redis://h:1", "redis://h:1", None).is_ok());
    }
}
