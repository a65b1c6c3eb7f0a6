//! Small parsers for SLURM's own notations (pure, no I/O).

/// Step ids SLURM uses for its special steps (slurm.h, 22.05).
pub const STEP_EXTERN: u32 = 0xffff_fffc;
pub const STEP_BATCH: u32 = 0xffff_fffb;
pub const STEP_INTERACTIVE: u32 = 0xffff_fffa;

/// The step's name as used in cgroup directories (`step_<name>`) and reports.
pub fn step_name(step_id: u32) -> String {
    match step_id {
        STEP_EXTERN => "extern".into(),
        STEP_BATCH => "batch".into(),
        STEP_INTERACTIVE => "interactive".into(),
        n => n.to_string(),
    }
}

/// Number of CPUs in a cpulist such as `0-3,8,10-11`. `None` if malformed.
pub fn cpulist_count(s: &str) -> Option<u32> {
    let s = s.trim();
    if s.is_empty() {
        return Some(0);
    }
    let mut n: u32 = 0;
    for part in s.split(',') {
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (a.trim().parse::<u32>().ok()?, b.trim().parse::<u32>().ok()?),
            None => {
                let v = part.trim().parse::<u32>().ok()?;
                (v, v)
            }
        };
        if b < a || b - a > 65_536 {
            return None;
        }
        n = n.checked_add(b - a + 1)?;
    }
    Some(n)
}

/// Expands a SLURM hostlist (`n[01-03,7],login1`) into names. `None` if malformed or over 100 000 hosts.
pub fn expand_hostlist(s: &str) -> Option<Vec<String>> {
    let mut out = Vec::new();
    // Split on commas outside brackets.
    let mut depth = 0i32;
    let mut cur = String::new();
    let mut parts = Vec::new();
    for c in s.trim().chars() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            _ => {}
        }
        if !(0..=1).contains(&depth) {
            return None;
        }
        if c == ',' && depth == 0 {
            parts.push(std::mem::take(&mut cur));
        } else {
            cur.push(c);
        }
    }
    if depth != 0 {
        return None;
    }
    parts.push(cur);
    for p in parts.into_iter().filter(|p| !p.is_empty()) {
        match p.find('[') {
            None => out.push(p),
            Some(i) => {
                let close = p.find(']')?;
                let (prefix, ranges, suffix) = (&p[..i], &p[i + 1..close], &p[close + 1..]);
                if suffix.contains('[') {
                    return None; // multi-dimensional lists are not used by SLURM node names here
                }
                for r in ranges.split(',') {
                    let (a, b) = r.split_once('-').unwrap_or((r, r));
                    let width = a.len();
                    let (x, y) = (a.parse::<u64>().ok()?, b.parse::<u64>().ok()?);
                    if y < x || y - x > 100_000 {
                        return None;
                    }
                    for v in x..=y {
                        out.push(format!("{prefix}{v:0width$}{suffix}"));
                        if out.len() > 100_000 {
                            return None;
                        }
                    }
                }
            }
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn cpulists() {
        assert_eq!(cpulist_count("0-1"), Some(2));
        assert_eq!(cpulist_count("0"), Some(1));
        assert_eq!(cpulist_count("0-3,8,10-11"), Some(7));
        assert_eq!(cpulist_count("3-1"), None);
        assert_eq!(cpulist_count("x"), None);
    }

    #[test]
    fn hostlists() {
        assert_eq!(expand_hostlist("vm").unwrap(), vec!["vm"]);
        assert_eq!(
            expand_hostlist("n[01-03],login1").unwrap(),
            vec!["n01", "n02", "n03", "login1"]
        );
        assert_eq!(expand_hostlist("vmn[1,2]").unwrap(), vec!["vmn1", "vmn2"]);
        assert_eq!(expand_hostlist("a[1-2]b").unwrap(), vec!["a1b", "a2b"]);
        assert!(expand_hostlist("n[1-").is_none());
        assert!(expand_hostlist("n[3-1]").is_none());
    }

    #[test]
    fn step_names() {
        assert_eq!(step_name(STEP_BATCH), "batch");
        assert_eq!(step_name(STEP_EXTERN), "extern");
        assert_eq!(step_name(3), "3");
    }

    proptest! {
        #[test]
        fn hostlist_round_trip(prefix in "[a-z]{1,5}", lo in 0u32..500, len in 0u32..50, width in 1usize..5) {
            let hi = lo + len;
            let list = format!("{prefix}[{lo:0width$}-{hi:0width$}]");
            let v = expand_hostlist(&list).unwrap();
            prop_assert_eq!(v.len() as u32, len + 1);
            prop_assert_eq!(&v[0], &format!("{prefix}{lo:0width$}"));
        }

        #[test]
        fn never_panics(s in ".{0,40}") {
            let _ = expand_hostlist(&s);
            let _ = cpulist_count(&s);
        }
    }
}
