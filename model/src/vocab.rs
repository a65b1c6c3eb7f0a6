//! Vocabularies: enums whose every value is written once, next to its one spelling, so that the
//! serialised name, the archived name, the list in an error message and what a person may type are
//! all derived from that one line and cannot drift apart.
//!
//! - [`vocabulary!`](crate::vocabulary) declares a closed list (a job state, a class, a mail
//!   policy): the enum with one `#[serde(rename)]` per value, `ALL`, `as_str`, and [`Vocabulary`].
//! - [`open_vocabulary!`](crate::open_vocabulary) declares a list that grows (spool event kinds): a
//!   name it does not know decodes into its `Other(String)` and is written back unchanged, so a spool
//!   from an older or newer writer still reads.
//!
//! Machines read the exact spelling (serde, [`Vocabulary::from_exact`]); people may type any case,
//! `-` or `_` between words, or an alias ([`Vocabulary::parse`]).

// At this path too, for crates that see the model only through the sampler's re-export.
pub use crate::{open_vocabulary, vocabulary};

/// A closed list of values, each with one spelling (declared by [`vocabulary!`](crate::vocabulary)).
pub trait Vocabulary: Sized + Copy + 'static {
    /// Every value, in the order declared.
    fn all() -> &'static [Self];
    /// The one spelling: what is serialised, archived and listed.
    fn spelling(self) -> &'static str;
    /// Other spellings a person may type for it (never written).
    fn aliases(self) -> &'static [&'static str];

    /// The value spelled exactly `s` (archives, spools, SLURM's output).
    fn from_exact(s: &str) -> Option<Self> {
        Self::all().iter().copied().find(|v| v.spelling() == s)
    }

    /// The value a person meant by `s`: its spelling or an alias, in any case, with `-` or `_`
    /// between words, blanks around it ignored.
    fn parse(s: &str) -> Option<Self> {
        let s = s.trim();
        Self::all()
            .iter()
            .copied()
            .find(|v| same_word(v.spelling(), s) || v.aliases().iter().any(|a| same_word(a, s)))
    }

    /// The spellings, comma-separated: the list an error message gives.
    fn spellings() -> String {
        let names: Vec<&str> = Self::all().iter().map(|v| v.spelling()).collect();
        names.join(", ")
    }
}

/// Equal ignoring ASCII case, with `-` and `_` the same character (`cpu-bound` = `CPU_BOUND`).
fn same_word(a: &str, b: &str) -> bool {
    let fold = |c: u8| match c {
        b'-' => b'_',
        c => c.to_ascii_lowercase(),
    };
    a.len() == b.len() && a.bytes().zip(b.bytes()).all(|(x, y)| fold(x) == fold(y))
}

/// Declares a closed vocabulary: `Variant = "spelling" | "alias"…` once per value. The caller
/// derives `Serialize`/`Deserialize` (each value gets `#[serde(rename = "spelling")]` here), and
/// gets `ALL`, `as_str` and [`Vocabulary`](crate::vocab::Vocabulary).
#[macro_export]
macro_rules! vocabulary {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $( $(#[$vmeta:meta])* $var:ident = $text:literal $(| $alias:literal)* ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        $vis enum $name {
            $( $(#[$vmeta])* #[serde(rename = $text)] $var, )+
        }

        impl $name {
            /// Every value, in the order declared.
            pub const ALL: [$name; [$($text),+].len()] = [$($name::$var),+];

            /// The one spelling (as serialised and archived).
            pub const fn as_str(self) -> &'static str {
                match self {
                    $( $name::$var => $text, )+
                }
            }
        }

        impl $crate::vocab::Vocabulary for $name {
            fn all() -> &'static [Self] {
                &Self::ALL
            }
            fn spelling(self) -> &'static str {
                self.as_str()
            }
            fn aliases(self) -> &'static [&'static str] {
                match self {
                    $( $name::$var => &[$($alias),*], )+
                }
            }
        }
    };
}

/// Declares an open vocabulary: the known values `Variant = "spelling"`, then `; Other(String)`
/// for any other name. It (de)serialises as a plain string: a known spelling decodes into its
/// value, any other into `Other` and is written back byte for byte.
#[macro_export]
macro_rules! open_vocabulary {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $( $(#[$vmeta:meta])* $var:ident = $text:literal ),+ ;
            $(#[$ometa:meta])* $other:ident(String) $(,)?
        }
    ) => {
        $(#[$meta])*
        $vis enum $name {
            $( $(#[$vmeta])* $var, )+
            $(#[$ometa])* $other(String),
        }

        impl $name {
            /// The values jobscope knows, in the order declared.
            pub const KNOWN: [$name; [$($text),+].len()] = [$($name::$var),+];

            /// The spelling (for `Other`, the name as it was read).
            pub fn as_str(&self) -> &str {
                match self {
                    $( $name::$var => $text, )+
                    $name::$other(s) => s,
                }
            }
        }

        impl From<&str> for $name {
            fn from(s: &str) -> Self {
                match s {
                    $( $text => $name::$var, )+
                    _ => $name::$other(s.to_owned()),
                }
            }
        }

        impl From<String> for $name {
            fn from(s: String) -> Self {
                match $name::from(s.as_str()) {
                    $name::$other(_) => $name::$other(s),
                    known => known,
                }
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl ::serde::Serialize for $name {
            fn serialize<S: ::serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> ::serde::Deserialize<'de> for $name {
            fn deserialize<D: ::serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                <String as ::serde::Deserialize>::deserialize(d).map($name::from)
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::{Deserialize, Serialize};

    crate::vocabulary! {
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
        enum Colour {
            DeepRed = "deep_red" | "crimson",
            Blue = "blue",
        }
    }

    #[test]
    fn people_may_type_any_case_either_separator_or_an_alias() {
        assert_eq!(Colour::parse("deep_red"), Some(Colour::DeepRed));
        assert_eq!(Colour::parse(" Deep-Red "), Some(Colour::DeepRed));
        assert_eq!(Colour::parse("CRIMSON"), Some(Colour::DeepRed));
        assert_eq!(Colour::parse("deepred"), None);
        assert_eq!(Colour::parse("deep__red"), None);
        assert_eq!(Colour::parse(""), None);
        // Machines get no such leniency.
        assert_eq!(Colour::from_exact("deep_red"), Some(Colour::DeepRed));
        assert_eq!(Colour::from_exact("deep-red"), None);
        assert_eq!(Colour::spellings(), "deep_red, blue");
    }

    #[test]
    fn the_spelling_is_what_serde_writes_and_reads() {
        assert_eq!(
            serde_json::to_string(&Colour::ALL).unwrap(),
            r#"["deep_red","blue"]"#
        );
        assert_eq!(
            serde_json::from_str::<Colour>(r#""deep_red""#).unwrap(),
            Colour::DeepRed
        );
        // An alias is for people, not for documents.
        assert!(serde_json::from_str::<Colour>(r#""crimson""#).is_err());
    }
}
