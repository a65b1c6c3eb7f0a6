//! Calendar dates and the time formats jobscope prints, on `chrono`: the one place a Unix time
//! becomes a date. Pure: the local time zone (which needs the system's zone files) is the caller's,
//! through [`in_zone`]; everything here without a zone is UTC and says so.
use chrono::{DateTime, Datelike, NaiveDate, NaiveDateTime, TimeZone, Utc};

/// Milliseconds in a UTC day.
pub const DAY_MS: u64 = 86_400_000;

/// The instant of a Unix time in seconds, if chrono can represent it (±262 000 years).
pub fn utc(unix_s: i64) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp(unix_s, 0)
}

/// `YYYY-MM-DD HH:MM:SS UTC` of a Unix time in seconds (`@<seconds>` past chrono's range).
pub fn utc_time(unix_s: u64) -> String {
    i64::try_from(unix_s)
        .ok()
        .and_then(utc)
        .map(|t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string())
        .unwrap_or_else(|| format!("@{unix_s}"))
}

/// `YYYY/MM/DD` of a Unix time in ms (UTC): the archive's day directory.
pub fn date_path(unix_ms: u64) -> String {
    let (y, m, d) = civil_from_days((unix_ms / DAY_MS) as i64);
    format!("{y:04}/{m:02}/{d:02}")
}

/// The wall-clock reading of a local time given as seconds on that zone's clock since its
/// 1970-01-01 00:00 (a Unix time plus the zone's offset at that instant): its hour, weekday, date.
pub fn wall(local_s: i64) -> Option<NaiveDateTime> {
    utc(local_s).map(|t| t.naive_utc())
}

/// The civil date (year, month, day) of day `days` since 1970-01-01, proleptic Gregorian.
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let d = i32::try_from(days)
        .ok()
        .and_then(NaiveDate::from_epoch_days)
        .unwrap_or(if days < 0 {
            NaiveDate::MIN
        } else {
            NaiveDate::MAX
        });
    (d.year() as i64, d.month(), d.day())
}

/// Days since 1970-01-01 of a civil date; `None` when there is no such date (2026-02-30, month 13).
pub fn days_from_civil(y: i64, m: u32, d: u32) -> Option<i64> {
    let date = NaiveDate::from_ymd_opt(i32::try_from(y).ok()?, m, d)?;
    Some(date.to_epoch_days() as i64)
}

/// A Unix time in seconds in time zone `tz`, with that instant's own offset (so a job on either
/// side of a daylight-saving change gets its own hour).
pub fn in_zone<Tz: TimeZone>(unix_s: i64, tz: &Tz) -> Option<DateTime<Tz>> {
    utc(unix_s).map(|t| t.with_timezone(tz))
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Timelike;

    #[test]
    fn dates_of_known_instants() {
        // 2026-11-21 00:00:00 UTC is 1_795_219_200 (date -u -d 2026-11-21 +%s).
        assert_eq!(date_path(1_795_219_200_000), "2026/11/21");
        assert_eq!(date_path(0), "1970/01/01");
        // 2000-02-29, a leap day of a century divisible by 400: 951_782_400.
        assert_eq!(date_path(951_782_400_000), "2000/02/29");
        assert_eq!(
            utc_time(1_795_219_200 + 3 * 3600 + 4 * 60 + 5),
            "2026-11-21 03:04:05 UTC"
        );
        assert_eq!(utc_time(u64::MAX), format!("@{}", u64::MAX));
        assert_eq!(days_from_civil(2026, 11, 21), Some(1_795_219_200 / 86_400));
        assert_eq!(days_from_civil(2026, 2, 30), None);
        assert_eq!(days_from_civil(2026, 13, 1), None);
        assert_eq!(civil_from_days(-1), (1969, 12, 31));
        // 2024-02-29 13:05:00 was a Thursday; one second before 1970 a Wednesday at 23 h.
        let w = wall(1_709_211_900).unwrap();
        assert_eq!((w.hour(), w.weekday().number_from_monday()), (13, 4));
        let w = wall(-1).unwrap();
        assert_eq!((w.hour(), w.weekday().number_from_monday()), (23, 3));
        assert_eq!(w.date(), NaiveDate::from_ymd_opt(1969, 12, 31).unwrap());
        assert!(wall(i64::MAX).is_none());
    }
}
