//! Just enough JSON for the tool's output: flat objects of strings, integers, booleans and
//! nulls, and arrays of them. Hand-written because that is all the tool prints; serde and
//! serde_json would be three more crates for twenty lines.

use std::fmt::Write;

/// A JSON value the tool prints.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Json {
    Null,
    Bool(bool),
    Int(u128),
    Str(String),
    Object(Vec<(&'static str, Json)>),
    Array(Vec<Json>),
}

impl Json {
    pub(crate) fn opt_str(v: Option<String>) -> Json {
        v.map_or(Json::Null, Json::Str)
    }

    pub(crate) fn opt_int(v: Option<u128>) -> Json {
        v.map_or(Json::Null, Json::Int)
    }

    /// The compact text form, on one line.
    pub(crate) fn render(&self) -> String {
        let mut out = String::new();
        self.write(&mut out);
        out
    }

    fn write(&self, out: &mut String) {
        match self {
            Json::Null => out.push_str("null"),
            Json::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Json::Int(i) => {
                let _ = write!(out, "{i}");
            }
            Json::Str(s) => write_str(out, s),
            Json::Object(fields) => {
                out.push('{');
                for (i, (name, value)) in fields.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write_str(out, name);
                    out.push(':');
                    value.write(out);
                }
                out.push('}');
            }
            Json::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    item.write(out);
                }
                out.push(']');
            }
        }
    }
}

fn write_str(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x20 || c == '\u{7f}' => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_are_escaped() {
        let s = Json::Str("a\"b\\c\nd\u{1}é".into()).render();
        assert_eq!(s, r#""a\"b\\c\nd\u0001é""#);
    }

    #[test]
    fn objects_and_arrays() {
        let v = Json::Array(vec![
            Json::Object(vec![
                ("k", Json::Str("x".into())),
                ("n", Json::Int(3)),
                ("t", Json::Bool(true)),
                ("z", Json::Null),
            ]),
            Json::Object(vec![]),
        ]);
        assert_eq!(v.render(), r#"[{"k":"x","n":3,"t":true,"z":null},{}]"#);
        assert_eq!(Json::Array(vec![]).render(), "[]");
    }
}
