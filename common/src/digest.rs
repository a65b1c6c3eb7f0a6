//! SHA-256 digests as lower-case hex: the archive's manifests (`archive/src/manifest.rs`) and the
//! batch script's hash (`plugin/src/script.rs`) write them the same way.
use sha2::{Digest, Sha256};

/// `bytes` as lower-case hex, two digits a byte.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The SHA-256 of `bytes`, lower-case hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

#[cfg(test)]
mod tests {
    /// FIPS 180-2, appendix B.1: the published digest of "abc", not one computed here.
    #[test]
    fn sha256_of_abc() {
        assert_eq!(
            super::sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
