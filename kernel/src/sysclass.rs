//! The one table that sorts system call numbers into [`SysClass`]es; the collector copies it into
//! the `sysclass` map before the programs attach. Numbers are the build architecture's
//! (`libc::SYS_*`), so the table is right for the architecture the collector runs on.

use jobscope_model::kernel_abi::{SysClass, MAX_SYSCALLS};
use libc::c_long;

/// System calls of each class; every number not listed is [`SysClass::Other`].
/// Calls that exist on one architecture only (x86_64 keeps the pre-`*at` ones) are added by
/// [`ARCH_ONLY`].
const COMMON: &[(SysClass, &[c_long])] = &[
    (
        SysClass::File,
        &[
            libc::SYS_read,
            libc::SYS_write,
            libc::SYS_pread64,
            libc::SYS_pwrite64,
            libc::SYS_readv,
            libc::SYS_writev,
            libc::SYS_preadv,
            libc::SYS_pwritev,
            libc::SYS_preadv2,
            libc::SYS_pwritev2,
            libc::SYS_openat,
            libc::SYS_openat2,
            libc::SYS_close,
            libc::SYS_close_range,
            libc::SYS_fstat,
            libc::SYS_newfstatat,
            libc::SYS_statx,
            libc::SYS_statfs,
            libc::SYS_fstatfs,
            libc::SYS_faccessat,
            libc::SYS_faccessat2,
            libc::SYS_readlinkat,
            libc::SYS_lseek,
            libc::SYS_fsync,
            libc::SYS_fdatasync,
            libc::SYS_sync_file_range,
            libc::SYS_getdents64,
            libc::SYS_ftruncate,
            libc::SYS_truncate,
            libc::SYS_fallocate,
            libc::SYS_unlinkat,
            libc::SYS_renameat,
            libc::SYS_renameat2,
            libc::SYS_mkdirat,
            libc::SYS_copy_file_range,
            libc::SYS_sendfile,
        ],
    ),
    (
        SysClass::Net,
        &[
            libc::SYS_socket,
            libc::SYS_socketpair,
            libc::SYS_connect,
            libc::SYS_accept,
            libc::SYS_accept4,
            libc::SYS_sendto,
            libc::SYS_recvfrom,
            libc::SYS_sendmsg,
            libc::SYS_recvmsg,
            libc::SYS_sendmmsg,
            libc::SYS_recvmmsg,
            libc::SYS_shutdown,
            libc::SYS_bind,
            libc::SYS_listen,
            libc::SYS_setsockopt,
            libc::SYS_getsockopt,
            libc::SYS_getsockname,
            libc::SYS_getpeername,
        ],
    ),
    (
        SysClass::Mem,
        &[
            libc::SYS_mmap,
            libc::SYS_munmap,
            libc::SYS_brk,
            libc::SYS_mprotect,
            libc::SYS_madvise,
            libc::SYS_mremap,
        ],
    ),
    (
        SysClass::Proc,
        &[
            libc::SYS_clone,
            libc::SYS_clone3,
            libc::SYS_execve,
            libc::SYS_execveat,
            libc::SYS_wait4,
            libc::SYS_waitid,
            libc::SYS_exit,
            libc::SYS_exit_group,
            libc::SYS_kill,
            libc::SYS_tkill,
            libc::SYS_tgkill,
        ],
    ),
    (
        SysClass::Sync,
        &[
            libc::SYS_futex,
            libc::SYS_futex_waitv,
            libc::SYS_sched_yield,
            libc::SYS_semop,
            libc::SYS_semtimedop,
        ],
    ),
];

/// The calls only x86_64 has (arm64 and newer ABIs have the `*at` forms only).
#[cfg(target_arch = "x86_64")]
const ARCH_ONLY: &[(SysClass, &[c_long])] = &[
    (
        SysClass::File,
        &[
            libc::SYS_open,
            libc::SYS_creat,
            libc::SYS_stat,
            libc::SYS_lstat,
            libc::SYS_access,
            libc::SYS_readlink,
            libc::SYS_getdents,
            libc::SYS_unlink,
            libc::SYS_rename,
            libc::SYS_mkdir,
        ],
    ),
    (SysClass::Proc, &[libc::SYS_fork, libc::SYS_vfork]),
];
#[cfg(not(target_arch = "x86_64"))]
const ARCH_ONLY: &[(SysClass, &[c_long])] = &[];

/// The table as the `sysclass` map holds it: index = system call number, value = class.
pub fn table() -> Vec<u32> {
    let mut t = vec![SysClass::Other as u32; MAX_SYSCALLS as usize];
    for (class, nrs) in COMMON.iter().chain(ARCH_ONLY) {
        for &nr in *nrs {
            // every number of the supported architectures is < 512; a larger one would be
            // counted as "other" by the program anyway, so it is simply left out here
            if let Some(slot) = usize::try_from(nr).ok().and_then(|i| t.get_mut(i)) {
                *slot = *class as u32;
            }
        }
    }
    t
}

/// The class of one system call number (the same answer the programs give).
pub fn class_of(nr: i64) -> SysClass {
    let t = table();
    match usize::try_from(nr).ok().and_then(|i| t.get(i)) {
        Some(&c) => SysClass::ALL[c as usize],
        None => SysClass::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn each_named_call_has_its_class() {
        use SysClass::*;
        let cases: &[(c_long, SysClass)] = &[
            (libc::SYS_read, File),
            (libc::SYS_write, File),
            (libc::SYS_pread64, File),
            (libc::SYS_openat, File),
            (libc::SYS_close, File),
            (libc::SYS_newfstatat, File),
            (libc::SYS_lseek, File),
            (libc::SYS_fsync, File),
            (libc::SYS_getdents64, File),
            (libc::SYS_socket, Net),
            (libc::SYS_connect, Net),
            (libc::SYS_accept4, Net),
            (libc::SYS_sendto, Net),
            (libc::SYS_recvmsg, Net),
            (libc::SYS_shutdown, Net),
            (libc::SYS_getsockopt, Net),
            (libc::SYS_mmap, Mem),
            (libc::SYS_brk, Mem),
            (libc::SYS_mremap, Mem),
            (libc::SYS_clone3, Proc),
            (libc::SYS_execve, Proc),
            (libc::SYS_wait4, Proc),
            (libc::SYS_exit_group, Proc),
            (libc::SYS_tgkill, Proc),
            (libc::SYS_futex, Sync),
            (libc::SYS_futex_waitv, Sync),
            (libc::SYS_sched_yield, Sync),
            (libc::SYS_semtimedop, Sync),
            // not in any list: other
            (libc::SYS_getppid, Other),
            (libc::SYS_ioctl, Other),
            (libc::SYS_poll, Other),
            (libc::SYS_epoll_wait, Other),
            (libc::SYS_bpf, Other),
        ];
        for &(nr, class) in cases {
            assert_eq!(class_of(nr), class, "system call {nr}");
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn x86_64_legacy_calls_and_fixed_numbers() {
        assert_eq!(class_of(libc::SYS_open), SysClass::File);
        assert_eq!(class_of(libc::SYS_stat), SysClass::File);
        assert_eq!(class_of(libc::SYS_fork), SysClass::Proc);
        assert_eq!(class_of(libc::SYS_vfork), SysClass::Proc);
        // the x86_64 numbers themselves, so that a wrong libc constant cannot go unnoticed
        assert_eq!(class_of(0), SysClass::File); // read
        assert_eq!(class_of(1), SysClass::File); // write
        assert_eq!(class_of(9), SysClass::Mem); // mmap
        assert_eq!(class_of(41), SysClass::Net); // socket
        assert_eq!(class_of(202), SysClass::Sync); // futex
        assert_eq!(class_of(231), SysClass::Proc); // exit_group
        assert_eq!(class_of(110), SysClass::Other); // getppid
    }

    #[test]
    fn out_of_range_is_other_and_lists_do_not_overlap() {
        assert_eq!(class_of(-1), SysClass::Other);
        assert_eq!(class_of(MAX_SYSCALLS as i64), SysClass::Other);
        assert_eq!(table().len(), MAX_SYSCALLS as usize);
        let mut seen = HashSet::new();
        for (_, nrs) in COMMON.iter().chain(ARCH_ONLY) {
            for nr in *nrs {
                assert!(seen.insert(*nr), "system call {nr} is in two lists");
                assert!((0..MAX_SYSCALLS as c_long).contains(nr));
            }
        }
    }
}
