//! The SLURM release a plugin build targets, read from `<slurm/slurm_version.h>` of the headers it is
//! built against. Shared by `plugin/build.rs` (which includes this file with `#[path]` and turns the
//! number into the plugin's `plugin_version`) and the plugin's unit tests. Pure: no I/O here.

/// A SLURM release as `SLURM_VERSION_NUMBER` encodes it: `(major << 16) + (minor << 8) + micro`,
/// e.g. `0x160508` = 22.05.8 (slurm_version.h's own `SLURM_VERSION_NUM` macro).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlurmVersion {
    pub number: u32,
}

impl SlurmVersion {
    pub fn major(self) -> u32 {
        (self.number >> 16) & 0xff
    }
    pub fn minor(self) -> u32 {
        (self.number >> 8) & 0xff
    }
    pub fn micro(self) -> u32 {
        self.number & 0xff
    }
    /// "22.05", the part SLURM compares when it loads a plugin.
    pub fn release(self) -> String {
        format!("{}.{:02}", self.major(), self.minor())
    }
}

/// Finds `#define SLURM_VERSION_NUMBER 0x...` in the text of `slurm_version.h`.
pub fn parse_slurm_version_h(text: &str) -> Result<SlurmVersion, String> {
    for line in text.lines() {
        let mut words = line.split_whitespace();
        if words.next() != Some("#define") || words.next() != Some("SLURM_VERSION_NUMBER") {
            continue;
        }
        let value = words
            .next()
            .ok_or("SLURM_VERSION_NUMBER is defined without a value")?;
        let hex = value
            .strip_prefix("0x")
            .or_else(|| value.strip_prefix("0X"))
            .ok_or_else(|| format!("SLURM_VERSION_NUMBER is not a hex literal: {value:?}"))?;
        let number = u32::from_str_radix(hex, 16)
            .map_err(|e| format!("SLURM_VERSION_NUMBER {value:?}: {e}"))?;
        if number > 0xff_ff_ff {
            return Err(format!("SLURM_VERSION_NUMBER {value:?} is out of range"));
        }
        return Ok(SlurmVersion { number });
    }
    Err("no `#define SLURM_VERSION_NUMBER` line".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The headers of the releases the project tests on, as their libslurm-dev packages install
    /// them (Debian 12: 22.05.8; Debian 13: 24.11.5; unstable: 26.05.5), in plugin/testdata/.
    #[test]
    fn reads_every_tested_releases_headers() {
        let v = parse_slurm_version_h(include_str!("../testdata/slurm_version-22.05.h")).unwrap();
        assert_eq!(
            (v.number, v.major(), v.minor(), v.micro()),
            (0x160508, 22, 5, 8)
        );
        assert_eq!(v.release(), "22.05");
        let v = parse_slurm_version_h(include_str!("../testdata/slurm_version-24.11.h")).unwrap();
        assert_eq!((v.major(), v.minor()), (24, 11));
        assert_eq!(v.release(), "24.11");
        let v = parse_slurm_version_h(include_str!("../testdata/slurm_version-26.05.h")).unwrap();
        assert_eq!(
            (v.number, v.major(), v.minor(), v.micro()),
            (0x1a0505, 26, 5, 5)
        );
        assert_eq!(v.release(), "26.05");
    }

    #[test]
    fn refuses_what_is_not_a_version() {
        assert!(parse_slurm_version_h("#define SLURM_VERSION_NUM(a,b,c) x\n").is_err());
        assert!(parse_slurm_version_h("#define SLURM_VERSION_NUMBER 22.05\n").is_err());
        assert!(parse_slurm_version_h("#define SLURM_VERSION_NUMBER\n").is_err());
        assert!(parse_slurm_version_h("#define SLURM_VERSION_NUMBER 0x1000000\n").is_err());
        // The function-like macros on nearby lines are not the number.
        let v = parse_slurm_version_h(
            "#define SLURM_VERSION_MAJOR(a) (((a) >> 16) & 0xff)\n#define SLURM_VERSION_NUMBER 0x180b05\n",
        )
        .unwrap();
        assert_eq!(v.release(), "24.11");
    }
}
