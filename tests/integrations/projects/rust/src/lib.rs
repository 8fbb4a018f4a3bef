//! A Rust crate whose tests use only the standard library.

/// The greatest common divisor of a and b.
pub fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

#[cfg(test)]
mod tests {
    use super::gcd;

    #[test]
    fn gcd_of_known_pairs() {
        assert_eq!(gcd(12, 18), 6);
        assert_eq!(gcd(7, 13), 1);
    }
}
