//! Key templates: `"invoice:{invoice.id}"` is text and `{parameter(.field)*}` placeholders,
//! with `{{` and `}}` for literal braces.

/// One placeholder: a parameter name and the fields read from it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Placeholder {
    pub(crate) root: String,
    /// Field names or tuple indexes, in order.
    pub(crate) fields: Vec<String>,
}

#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Piece {
    Text(String),
    Value(Placeholder),
}

fn is_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c == '_' || c.is_alphabetic())
        && chars.all(|c| c == '_' || c.is_alphanumeric())
}

fn is_index(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) && (s == "0" || !s.starts_with('0'))
}

fn placeholder(inner: &str) -> Result<Placeholder, String> {
    let mut parts = inner.split('.');
    let root = parts.next().unwrap_or_default().trim();
    if root.is_empty() {
        return Err(
            "empty `{}` in the key: name a parameter, such as `{id}` or `{order.id}`".to_owned(),
        );
    }
    if !is_name(root) {
        let hint = if inner.contains(':') {
            " (format specs are not supported: values are written with `Display`)"
        } else {
            ""
        };
        return Err(format!(
            "`{{{inner}}}` in the key is not a parameter name{hint}"
        ));
    }
    let fields: Vec<String> = parts.map(|f| f.trim().to_owned()).collect();
    if let Some(bad) = fields.iter().find(|f| !is_name(f) && !is_index(f)) {
        return Err(format!(
            "`{{{inner}}}` in the key: `{bad}` is not a field name or tuple index"
        ));
    }
    Ok(Placeholder {
        root: root.to_owned(),
        fields,
    })
}

/// The pieces of `template`, or why it is malformed.
pub(crate) fn parse(template: &str) -> Result<Vec<Piece>, String> {
    let mut pieces = Vec::new();
    let mut text = String::new();
    let mut rest = template;
    while let Some(i) = rest.find(['{', '}']) {
        text.push_str(&rest[..i]);
        let brace = &rest[i..];
        if let Some(after) = brace.strip_prefix("{{") {
            text.push('{');
            rest = after;
        } else if let Some(after) = brace.strip_prefix("}}") {
            text.push('}');
            rest = after;
        } else if brace.starts_with('}') {
            return Err("unmatched `}` in the key: write `}}` for a literal `}`".to_owned());
        } else {
            let end = brace.find('}').ok_or(
                "unclosed `{` in the key: write `{{` for a literal `{`, or close the placeholder",
            )?;
            if !text.is_empty() {
                pieces.push(Piece::Text(std::mem::take(&mut text)));
            }
            pieces.push(Piece::Value(placeholder(&brace[1..end])?));
            rest = &brace[end + 1..];
        }
    }
    text.push_str(rest);
    if !text.is_empty() {
        pieces.push(Piece::Text(text));
    }
    Ok(pieces)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(root: &str, fields: &[&str]) -> Piece {
        Piece::Value(Placeholder {
            root: root.to_owned(),
            fields: fields.iter().map(|f| (*f).to_owned()).collect(),
        })
    }

    #[test]
    fn text_and_placeholders() {
        assert_eq!(
            parse("invoice:{invoice.id}:{n}").unwrap(),
            vec![
                Piece::Text("invoice:".into()),
                value("invoice", &["id"]),
                Piece::Text(":".into()),
                value("n", &[]),
            ]
        );
        assert_eq!(parse("{pair.0}").unwrap(), vec![value("pair", &["0"])]);
        assert_eq!(parse("a{{b}}c").unwrap(), vec![Piece::Text("a{b}c".into())]);
        assert_eq!(parse("").unwrap(), vec![]);
    }

    #[test]
    fn malformed_templates() {
        for bad in [
            "{}", "{", "a}", "{a.}", "{a b}", "{1}", "{a:?}", "{a.01}", "{a-b}",
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
        assert!(parse("{a:?}").unwrap_err().contains("format specs"));
    }
}
