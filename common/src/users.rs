//! The user and group databases (`getpwuid_r`, `getgrnam_r`, `getgrgid_r`), through NSS as the C
//! library configures it (LDAP, SSSD…).

/// A user's entry, what jobscope needs of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    pub name: String,
    /// The primary group.
    pub gid: u32,
}

/// The entry of `uid`; `None` when there is none or it could not be read.
pub fn by_uid(uid: u32) -> Option<User> {
    // Entries longer than the usual buffer exist (long gecos, NSS modules): grow on ERANGE, to a bound.
    let mut len = 16 * 1024;
    loop {
        let mut buf = vec![0 as libc::c_char; len];
        // SAFETY: an all-zero passwd is a valid out-value (null pointers, zero ids).
        let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
        let mut out: *mut libc::passwd = std::ptr::null_mut();
        // SAFETY: `pw`, `buf` and `out` are valid for the call; `buf.len()` is its size.
        let rc = unsafe { libc::getpwuid_r(uid, &mut pw, buf.as_mut_ptr(), buf.len(), &mut out) };
        if rc == libc::ERANGE && len < 1024 * 1024 {
            len *= 4;
            continue;
        }
        if rc != 0 || out.is_null() || pw.pw_name.is_null() {
            return None;
        }
        // SAFETY: on success pw_name points to a NUL-terminated string inside `buf`, alive here.
        let name = unsafe { std::ffi::CStr::from_ptr(pw.pw_name) }
            .to_string_lossy()
            .into_owned();
        return Some(User {
            name,
            gid: pw.pw_gid,
        });
    }
}

/// Looks up a group id by name (`getgrnam_r`).
pub fn group_id(name: &str) -> Option<u32> {
    let c = std::ffi::CString::new(name).ok()?;
    let mut grp: libc::group = unsafe { std::mem::zeroed() };
    let mut buf = vec![0 as libc::c_char; 16 * 1024];
    let mut result: *mut libc::group = std::ptr::null_mut();
    // SAFETY: all pointers are valid for the call; buf outlives it.
    let rc = unsafe {
        libc::getgrnam_r(
            c.as_ptr(),
            &mut grp,
            buf.as_mut_ptr(),
            buf.len(),
            &mut result,
        )
    };
    (rc == 0 && !result.is_null()).then_some(grp.gr_gid)
}

/// The name of group `gid` (`getgrgid_r`), for `JobSummary::group`; `None` if it has none here.
pub fn group_name(gid: u32) -> Option<String> {
    let mut grp: libc::group = unsafe { std::mem::zeroed() };
    let mut buf = vec![0 as libc::c_char; 16 * 1024];
    let mut result: *mut libc::group = std::ptr::null_mut();
    // SAFETY: all pointers are valid for the call; buf outlives it.
    let rc = unsafe { libc::getgrgid_r(gid, &mut grp, buf.as_mut_ptr(), buf.len(), &mut result) };
    if rc != 0 || result.is_null() || grp.gr_name.is_null() {
        return None;
    }
    // SAFETY: gr_name points into buf, NUL-terminated by getgrgid_r.
    let name = unsafe { std::ffi::CStr::from_ptr(grp.gr_name) };
    Some(name.to_string_lossy().into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The entry of `uid` as /etc/passwd spells it (name, gid), read independently of libc.
    fn from_passwd_file(uid: u32) -> Option<(String, u32)> {
        let text = std::fs::read_to_string("/etc/passwd").ok()?;
        text.lines().find_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            if f.len() < 4 || f[2].parse::<u32>() != Ok(uid) {
                return None;
            }
            Some((f[0].to_string(), f[3].parse().ok()?))
        })
    }

    #[test]
    fn root_is_found_as_the_passwd_file_says() {
        let (name, gid) = from_passwd_file(0).expect("/etc/passwd has root");
        assert_eq!(by_uid(0), Some(User { name, gid }));
    }

    #[test]
    fn a_uid_without_an_entry_is_none() {
        let unused = (60_000..4_000_000_000u32)
            .step_by(7_919)
            .find(|u| from_passwd_file(*u).is_none())
            .unwrap();
        assert_eq!(by_uid(unused), None);
    }

    #[test]
    fn groups() {
        assert_eq!(group_id("root"), Some(0));
        assert_eq!(group_id("no-such-group-xyz"), None);
        assert_eq!(group_name(0).as_deref(), Some("root"));
        assert_eq!(group_name(4_000_000_000), None);
    }
}
