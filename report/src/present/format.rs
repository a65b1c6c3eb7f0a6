//! How numbers read: bytes, durations, percentages, resource-hours and sparklines. Every view takes
//! its figures from here, so no two views round the same figure differently.

/// `600.0 MiB`, `12 B`, `n/a`.
pub fn fmt_bytes(b: Option<u64>) -> String {
    match b {
        None => "n/a".into(),
        Some(b) => {
            let units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
            let mut v = b as f64;
            let mut i = 0;
            while v >= 1024.0 && i < units.len() - 1 {
                v /= 1024.0;
                i += 1;
            }
            if i == 0 {
                format!("{b} B")
            } else {
                format!("{v:.1} {}", units[i])
            }
        }
    }
}

/// `n` and its noun, singular or plural as `n` asks: `1 job`, `0 jobs`, `74 jobs`. For the nouns
/// whose plural takes an `s` (job, day, hour, user, core, node).
pub fn plural(n: u64, noun: &str) -> String {
    format!("{n} {noun}{}", if n == 1 { "" } else { "s" })
}

/// A count for people: `950`, `12.3 k`, `2.1 M`, `4.0 G`.
pub fn fmt_count(n: u64) -> String {
    let f = n as f64;
    if n < 10_000 {
        n.to_string()
    } else if f < 1e6 {
        format!("{:.1} k", f / 1e3)
    } else if f < 1e9 {
        format!("{:.1} M", f / 1e6)
    } else {
        format!("{:.1} G", f / 1e9)
    }
}

/// THE duration: `1h02m05s`, `12m05s`, `42 s`, `1d01h00m`. Seconds alone are written as every
/// other figure with a unit is (`42 s`, like `15.5 s` of CPU time and `12 B`); the compound forms
/// are one token.
pub fn fmt_duration(s: f64) -> String {
    let s = if s.is_finite() {
        s.max(0.0).round() as u64
    } else {
        0
    };
    let (d, h, m, sec) = (s / 86_400, s / 3600 % 24, s / 60 % 60, s % 60);
    if d > 0 {
        format!("{d}d{h:02}h{m:02}m")
    } else if h > 0 {
        format!("{h}h{m:02}m{sec:02}s")
    } else if m > 0 {
        format!("{m}m{sec:02}s")
    } else {
        format!("{sec} s")
    }
}

/// A job's or step's elapsed time, or any duration under a minute where a whole second is a
/// large share of the figure: [`fmt_duration`], with tenths under a minute (`12.0 s`, `0.3 s`; a
/// 0.3 s job does not read `0 s`).
pub fn fmt_elapsed(s: f64) -> String {
    if s.is_finite() && s < 59.95 {
        format!("{:.1} s", s.max(0.0))
    } else {
        fmt_duration(s)
    }
}

/// [`fmt_duration`] without the seconds once it reaches hours (`3h12m`): the subject line.
pub fn short_duration(s: f64) -> String {
    let d = fmt_duration(s);
    match d.find('h') {
        Some(i) if d.ends_with('s') && d[i + 1..].len() == 6 => d[..d.len() - 3].to_string(),
        _ => d,
    }
}

/// Seconds in SLURM's `--time` notation, exact (`00:01:00`, `1-01:00:00`): what users write.
pub fn fmt_slurm_time(s: u64) -> String {
    jobscope_model::summary::analysis::slurm_time(s)
}

/// `48.9 %` (one decimal), `n/a`.
pub fn fmt_pct(p: Option<f64>) -> String {
    p.filter(|p| p.is_finite())
        .map(|p| format!("{p:.1} %"))
        .unwrap_or_else(|| "n/a".into())
}

/// `49 %` (whole percent: the subject line and the digest's short columns).
pub fn fmt_pct0(p: Option<f64>) -> String {
    p.filter(|p| p.is_finite())
        .map(|p| format!("{p:.0} %"))
        .unwrap_or_else(|| "n/a".into())
}

/// Short: `12.1 s`; long: `1h02m05s (3725 s)`, so the exact figure is always there once.
pub fn fmt_secs(s: Option<f64>) -> String {
    s.map(|s| {
        if s < 60.0 {
            format!("{s:.1} s")
        } else {
            format!("{} ({s:.0} s)", fmt_duration(s))
        }
    })
    .unwrap_or_else(|| "n/a".into())
}

/// Resource-hours that read true at any scale: at least two significant digits below 10
/// (`0.0021`, `0.011`, `0.50`, `2.3`), whole numbers from 100.
pub fn fmt_hours(h: Option<f64>) -> String {
    match h {
        None => "n/a".into(),
        Some(h) if !h.is_finite() => "n/a".into(),
        Some(0.0) => "0".into(),
        Some(h) if h >= 100.0 => format!("{h:.0}"),
        Some(h) if h >= 10.0 => format!("{h:.1}"),
        Some(h) if h >= 1.0 => format!("{h:.2}"),
        Some(h) => {
            let decimals = (1 - h.log10().floor() as i32).clamp(2, 12) as usize;
            format!("{h:.decimals$}")
        }
    }
}

/// `unused` as a share of `allocated`: `70 %`, or `n/a`.
pub fn fmt_share(unused: Option<f64>, allocated: Option<f64>) -> String {
    match (unused, allocated) {
        (Some(u), Some(a)) if a > 0.0 => fmt_pct0(Some(100.0 * u / a)),
        _ => "n/a".into(),
    }
}

/// A busy-core count: `1.0`.
pub fn fmt_cores(c: f64) -> String {
    format!("{c:.1}")
}

/// Energy: `1.25 kWh`, `350.0 Wh`.
pub fn fmt_energy(kwh: f64) -> String {
    if kwh >= 1.0 {
        format!("{kwh:.2} kWh")
    } else {
        format!("{:.1} Wh", kwh * 1000.0)
    }
}

const SPARKS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];

/// A Unicode sparkline of `vals` scaled to `max` (missing values are spaces), resampled to `width`.
pub fn sparkline(vals: &[Option<f64>], max: f64, width: usize) -> String {
    if vals.is_empty() || width == 0 {
        return String::new();
    }
    let n = vals.len();
    let cols = width.min(n);
    (0..cols)
        .map(|c| {
            // Each column shows the largest value of the samples it covers, so peaks stay visible.
            let (a, b) = (c * n / cols, ((c + 1) * n / cols).max(c * n / cols + 1));
            let v = vals[a..b.min(n)]
                .iter()
                .flatten()
                .fold(None, |m: Option<f64>, &x| Some(m.map_or(x, |m| m.max(x))));
            match v {
                None => ' ',
                Some(v) if max <= 0.0 => {
                    if v > 0.0 {
                        SPARKS[7]
                    } else {
                        SPARKS[0]
                    }
                }
                Some(v) => SPARKS[((v / max).clamp(0.0, 1.0) * 7.0).round() as usize],
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(fmt_bytes(Some(600 * 1024 * 1024)), "600.0 MiB");
        assert_eq!(fmt_bytes(Some(12)), "12 B");
        assert_eq!(fmt_bytes(None), "n/a");
        assert_eq!(fmt_duration(3725.0), "1h02m05s");
        assert_eq!(fmt_duration(59.6), "1m00s");
        assert_eq!(fmt_duration(90_000.0), "1d01h00m");
        assert_eq!(fmt_elapsed(12.0), "12.0 s");
        assert_eq!(fmt_elapsed(0.296), "0.3 s");
        assert_eq!(fmt_elapsed(59.96), "1m00s");
        assert_eq!(fmt_elapsed(3725.0), "1h02m05s");
        assert_eq!(short_duration(42.0), "42 s");
        assert_eq!(fmt_duration(42.4), "42 s");
        assert_eq!(short_duration(725.0), "12m05s");
        assert_eq!(short_duration(11_520.0), "3h12m");
        assert_eq!(short_duration(90_000.0), "1d01h00m");
        assert_eq!(fmt_slurm_time(60), "00:01:00");
        assert_eq!(plural(1, "job"), "1 job");
        assert_eq!(plural(0, "job"), "0 jobs");
        assert_eq!(plural(10_000, "job"), "10000 jobs");
    }

    #[test]
    fn hours_read_true_at_any_scale() {
        // 70 % of a tiny allocation unused must not read "0.002 unused of 0.002".
        assert_eq!(fmt_hours(Some(0.0021)), "0.0021");
        assert_eq!(fmt_hours(Some(0.0030)), "0.0030");
        assert_eq!(fmt_hours(Some(0.011)), "0.011");
        assert_eq!(fmt_hours(Some(0.5)), "0.50");
        assert_eq!(fmt_hours(Some(2.346)), "2.35");
        assert_eq!(fmt_hours(Some(12.34)), "12.3");
        assert_eq!(fmt_hours(Some(1234.4)), "1234");
        assert_eq!(fmt_hours(Some(0.0)), "0");
        assert_eq!(fmt_hours(None), "n/a");
        assert_eq!(fmt_share(Some(0.0021), Some(0.0030)), "70 %");
        assert_eq!(fmt_share(Some(0.0), Some(0.0)), "n/a");
    }

    #[test]
    fn sparkline_keeps_peaks_and_gaps() {
        assert_eq!(
            sparkline(&[Some(0.0), Some(1.0), Some(2.0)], 2.0, 10),
            "▁▅█"
        );
        assert_eq!(sparkline(&[Some(0.0), None, Some(2.0)], 2.0, 10), "▁ █");
        // 100 values squeezed into 10 columns: the single peak survives
        let mut v = vec![Some(0.0); 100];
        v[55] = Some(8.0);
        let s = sparkline(&v, 8.0, 10);
        assert_eq!(s.chars().filter(|&c| c == '█').count(), 1);
    }
}
