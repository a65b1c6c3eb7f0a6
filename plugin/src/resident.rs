//! Keeps this shared object mapped for the life of the process once it has started a thread.
//!
//! slurmstepd unloads SPANK plugins (`dlclose`) when the step ends. The sampler and the GPU monitor
//! are stopped with a bounded wait in `exit`, but a thread stuck in a driver call (an NVML call that
//! never returns) can outlive that wait. If the object were unmapped under it, the thread would
//! return into unmapped code and crash slurmstepd, possibly long after the job ended. Marking the
//! object `RTLD_NODELETE` makes `dlclose` leave it mapped, so a late thread always has its code.
//! The cost is a few hundred KiB of mapping per slurmstepd that ran a sampler, freed when that
//! slurmstepd exits (it is per step, not per node).

use std::sync::OnceLock;

static PINNED: OnceLock<bool> = OnceLock::new();

/// Pins this object in memory (idempotent). Returns whether it is pinned.
pub(crate) fn pin() -> bool {
    *PINNED.get_or_init(|| {
        let ok = pin_now();
        if !ok {
            crate::log_error(
                "cannot mark the plugin RTLD_NODELETE; a GPU call that never returns could outlive it",
            );
        }
        ok
    })
}

fn pin_now() -> bool {
    // Our own file name: the object that contains this function.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    let addr = pin_now as *const libc::c_void;
    // SAFETY: dladdr only reads the loader's tables; `info` is a valid out-pointer.
    if unsafe { libc::dladdr(addr, &mut info) } == 0 || info.dli_fname.is_null() {
        return false;
    }
    // RTLD_NOLOAD: take a reference to the already loaded object (never load a second copy);
    // RTLD_NODELETE: never unmap it, whatever dlclose calls follow. The handle is deliberately
    // never closed.
    // SAFETY: dli_fname is a NUL-terminated path owned by the loader.
    let h = unsafe {
        libc::dlopen(
            info.dli_fname,
            libc::RTLD_LAZY | libc::RTLD_NOLOAD | libc::RTLD_NODELETE,
        )
    };
    !h.is_null()
}
