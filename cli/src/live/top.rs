//! `jobscope top JOBID`: the running job's figures per node, now (the last sample), refreshed in
//! place on a terminal. The figures are the live report's ([`super::live`]); only the layout is
//! here, with every number formatted by the presenter (`jobscope_report::present`).
use super::Live;
use jobscope_model::summary::{NodeSummary, Point};
use jobscope_report::present::{clean, fmt_bytes, fmt_elapsed, fmt_pct0};

const BOLD: &str = "\x1b[1m";
const YELLOW: &str = "\x1b[33m";
const RED: &str = "\x1b[31m";
const RESET: &str = "\x1b[0m";

/// The node's last sampled point that has a value for `f`.
fn last<T>(n: &NodeSummary, f: impl Fn(&Point) -> Option<T>) -> Option<T> {
    n.timeline.iter().rev().find_map(f)
}

fn paint(text: String, colour: Option<&str>, color: bool) -> String {
    match (color, colour) {
        (true, Some(c)) => format!("{c}{text}{RESET}"),
        _ => text,
    }
}

/// One screen of `top`. `color`: ANSI colours (a terminal only).
pub fn render(live: &Live, color: bool) -> String {
    let s = &live.summary;
    let name = clean(s.name.as_deref().unwrap_or("(unknown)"), 60);
    let user = clean(s.user.as_deref().unwrap_or("(unknown)"), 32);
    let head = format!(
        "jobscope top: job {} ({name}) of {user}, {}, elapsed {}",
        s.job_id,
        s.state.as_str(),
        fmt_elapsed(s.elapsed_s)
    );
    let mut out = if color {
        format!("{BOLD}{head}{RESET}\n")
    } else {
        format!("{head}\n")
    };
    out += &format!(
        "{:<16} {:>14} {:>26} {:>10} {:>12} {:>8}  {}\n",
        "node", "busy cores", "memory (of limit)", "GPU util", "I/O", "samples", "from"
    );
    for (node, src) in &live.sources {
        let Some(n) = s.nodes.iter().find(|n| &n.node == node) else {
            out += &format!(
                "{:<16} {:>14}\n",
                clean(node, 16),
                "not reachable from here"
            );
            continue;
        };
        let busy = last(n, |p| p.busy_cores);
        let cores = n.alloc_cores;
        let busy_txt = match (busy, cores) {
            (Some(b), Some(c)) => format!("{b:.1} of {c}"),
            (Some(b), None) => format!("{b:.1}"),
            _ => "-".into(),
        };
        // Few of the allocated cores busy: the colour a person notices first.
        let busy_col = match (busy, cores) {
            (Some(b), Some(c)) if c > 0 && b < 0.5 * c as f64 => Some(YELLOW),
            _ => None,
        };
        let mem = last(n, |p| p.mem_bytes);
        let limit = n.mem.limit_bytes.or(n.alloc_mem_bytes);
        let share = match (mem, limit) {
            (Some(m), Some(l)) if l > 0 => Some(100.0 * m as f64 / l as f64),
            _ => None,
        };
        let mem_txt = match limit {
            Some(_) => format!(
                "{} of {} {}",
                fmt_bytes(mem),
                fmt_bytes(limit),
                fmt_pct0(share)
            ),
            None => fmt_bytes(mem),
        };
        let mem_col = match share {
            Some(p) if p >= 90.0 => Some(RED),
            _ => None,
        };
        let gpu = if n.gpus.is_empty() {
            "-".to_string()
        } else {
            let u: Vec<f64> = n.gpus.iter().filter_map(|g| g.util_mean_pct).collect();
            if u.is_empty() {
                "n/a".into()
            } else {
                fmt_pct0(Some(u.iter().sum::<f64>() / u.len() as f64))
            }
        };
        let io = last(n, |p| p.io_bytes_per_s)
            .map(|r| format!("{}/s", fmt_bytes(Some(r as u64))))
            .unwrap_or_else(|| "-".into());
        out += &format!(
            "{:<16} {} {} {:>10} {:>12} {:>8}  {}\n",
            clean(node, 16),
            paint(format!("{busy_txt:>14}"), busy_col, color),
            paint(format!("{mem_txt:>26}"), mem_col, color),
            gpu,
            io,
            n.quality.samples,
            src.unwrap_or("-"),
        );
    }
    out += &format!(
        "CPU so far {} of allocated core-time; memory peak {} ({} of the request)\n",
        fmt_pct0(s.efficiency.cpu_pct),
        fmt_bytes(s.mem.peak_bytes),
        fmt_pct0(s.efficiency.mem_pct),
    );
    out
}
