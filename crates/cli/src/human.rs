//! Sizes, rates, counts and durations as a person reads them. Sizes and counts are
//! indicatif's formatters (the progress bars' own), so every number reads the same way.

use std::time::Duration;

use indicatif::{HumanBytes, HumanCount};

/// `1536` → `1.50 KiB`; bytes below 1 KiB are shown exactly (`512 B`).
pub fn bytes(n: u64) -> String {
    HumanBytes(n).to_string()
}

/// Bytes per second over `elapsed` (`0 B/s` for a zero duration).
pub fn rate(n: u64, elapsed: Duration) -> String {
    format!("{}/s", bytes(per_second(n, elapsed) as u64))
}

/// Megabytes (10^6 bytes) per second, as benchmarks usually state throughput.
pub fn mb_per_s(n: u64, elapsed: Duration) -> f64 {
    per_second(n, elapsed) / 1_000_000.0
}

/// Events per second over `elapsed` (0 for a zero duration).
pub fn per_second(n: u64, elapsed: Duration) -> f64 {
    let secs = elapsed.as_secs_f64();
    if secs > 0.0 { n as f64 / secs } else { 0.0 }
}

/// `1234567` → `1,234,567`.
pub fn count(n: u64) -> String {
    HumanCount(n).to_string()
}

/// `1.234 s`, `56 ms`, `2m 5s`.
pub fn duration(d: Duration) -> String {
    let secs = d.as_secs_f64();
    if secs < 1.0 {
        format!("{} ms", d.as_millis())
    } else if secs < 60.0 {
        format!("{secs:.2} s")
    } else {
        format!("{}m {}s", d.as_secs() / 60, d.as_secs() % 60)
    }
}

/// `part / whole` as a percentage with one decimal (`n/a` when `whole` is 0).
pub fn percent(part: u64, whole: u64) -> String {
    if whole == 0 {
        "n/a".to_owned()
    } else {
        format!("{:.1}%", part as f64 * 100.0 / whole as f64)
    }
}

/// Parses a size such as `1048576`, `64KiB`, `1 MiB`, `4m`, `2GB` (binary multiples for all
/// suffixes, as segment sizes are usually meant; units up to EiB). Never panics: a number or a
/// product past `u64::MAX` (`16EiB`, `99999999999999999999`) is an error.
///
/// # Errors
/// A message naming what could not be read: not a whole number of bytes (`-1`, `1.5MiB`,
/// garbage), an unknown unit, or a size past `u64::MAX`.
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '_'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let digits = num.replace('_', "");
    let num: u64 = match digits.parse() {
        Ok(n) => n,
        // All digits, yet not a u64: a number past 2^64 - 1.
        Err(_) if !digits.is_empty() => return Err(format!("`{s}` is too large")),
        Err(_) => {
            return Err(format!(
                "`{s}` is not a size (a whole number of bytes with an optional unit, e.g. \
                 1048576, 64KiB, 1MiB, 2GiB)"
            ));
        }
    };
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        "p" | "pb" | "pib" => 1 << 50,
        "e" | "eb" | "eib" => 1 << 60,
        other => {
            return Err(format!(
                "`{other}` in `{s}` is not a size unit (B, KiB, MiB, GiB, TiB, PiB, EiB)"
            ));
        }
    };
    num.checked_mul(mult)
        .ok_or_else(|| format!("`{s}` is too large (the most is 16 EiB - 1 byte)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_rates_and_counts_read_naturally() {
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(1023), "1023 B");
        assert_eq!(bytes(1536), "1.50 KiB");
        assert_eq!(bytes(3 << 20), "3.00 MiB");
        assert_eq!(bytes(u64::MAX), "16.00 EiB");
        assert_eq!(rate(2 << 20, Duration::from_secs(2)), "1.00 MiB/s");
        assert_eq!(rate(5, Duration::ZERO), "0 B/s");
        assert_eq!(count(0), "0");
        assert_eq!(count(1234567), "1,234,567");
        assert_eq!(count(200_000), "200,000");
        assert_eq!(percent(1, 4), "25.0%");
        assert_eq!(percent(1, 0), "n/a");
        assert_eq!(duration(Duration::from_millis(56)), "56 ms");
        assert_eq!(duration(Duration::from_secs(125)), "2m 5s");
    }

    #[test]
    fn parse_bytes_accepts_units_and_rejects_garbage() {
        assert_eq!(parse_bytes("1048576"), Ok(1 << 20));
        assert_eq!(parse_bytes("64KiB"), Ok(64 << 10));
        assert_eq!(parse_bytes("1 MiB"), Ok(1 << 20));
        assert_eq!(parse_bytes("4m"), Ok(4 << 20));
        assert_eq!(parse_bytes("1_000"), Ok(1000));
        let not_a_size = |s: &str| {
            format!(
                "`{s}` is not a size (a whole number of bytes with an optional unit, e.g. \
                 1048576, 64KiB, 1MiB, 2GiB)"
            )
        };
        let past_u64 = |s: &str| format!("`{s}` is too large");
        let overflows = |s: &str| format!("`{s}` is too large (the most is 16 EiB - 1 byte)");
        let bad_unit = |unit: &str, s: &str| {
            format!("`{unit}` in `{s}` is not a size unit (B, KiB, MiB, GiB, TiB, PiB, EiB)")
        };
        assert_eq!(parse_bytes("x"), Err(not_a_size("x")));
        assert_eq!(
            parse_bytes("3 parsecs"),
            Err(bad_unit("parsecs", "3 parsecs"))
        );
        assert_eq!(
            parse_bytes("99999999999999TiB"),
            Err(overflows("99999999999999TiB"))
        );
        assert_eq!(parse_bytes("15EiB"), Ok(15 << 60));
        assert_eq!(parse_bytes("18446744073709551615"), Ok(u64::MAX));
        for (bad, expected) in [
            ("16EiB", overflows("16EiB")),
            ("18446744073709551616", past_u64("18446744073709551616")),
            (
                "99999999999999999999999999",
                past_u64("99999999999999999999999999"),
            ),
            ("-1", not_a_size("-1")),
            ("", not_a_size("")),
            ("_", not_a_size("_")),
            ("1.5MiB", bad_unit(".5mib", "1.5MiB")),
            ("+5", not_a_size("+5")),
            ("KiB", not_a_size("KiB")),
        ] {
            assert_eq!(parse_bytes(bad), Err(expected), "{bad}");
        }
        assert!(parse_bytes("16EiB").is_err_and(|e| e.contains("too large")));
    }
}
