//! Parsing the attribute's arguments: `name = value` pairs, each name at most once. Values
//! are only parsed here; what they mean is checked in `validate.rs`.

use proc_macro2::Span;
use syn::ext::IdentExt;
use syn::parse::{Parse, ParseStream};
use syn::{Expr, Ident, LitInt, LitStr, Token};

mod kw {
    syn::custom_keyword!(key);
    syn::custom_keyword!(keys);
    syn::custom_keyword!(ttl);
    syn::custom_keyword!(wait);
    syn::custom_keyword!(retry);
    syn::custom_keyword!(on_busy);
    syn::custom_keyword!(hold_at_least);
    syn::custom_keyword!(cooldown);
    syn::custom_keyword!(client);
    syn::custom_keyword!(guard);
    syn::custom_keyword!(mode);
    syn::custom_keyword!(permits);
}

/// A duration as written: whole seconds, or a string such as `"500ms"`.
pub(crate) enum DurationArg {
    Secs(LitInt),
    Text(LitStr),
}

impl Parse for DurationArg {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let lookahead = input.lookahead1();
        if lookahead.peek(LitInt) {
            input.parse().map(DurationArg::Secs)
        } else if lookahead.peek(LitStr) {
            input.parse().map(DurationArg::Text)
        } else {
            Err(lookahead.error())
        }
    }
}

/// The arguments of one `#[distributed_lock(...)]`, as written.
#[derive(Default)]
pub(crate) struct LockArgs {
    pub(crate) key: Option<LitStr>,
    /// `keys = ["a", "b:{id}"]`: a multi-lock; the bracket's span for errors about the list.
    pub(crate) keys: Option<(Span, Vec<LitStr>)>,
    pub(crate) ttl: Option<DurationArg>,
    pub(crate) wait: Option<DurationArg>,
    pub(crate) retry: Option<LitStr>,
    pub(crate) on_busy: Option<LitStr>,
    pub(crate) hold_at_least: Option<DurationArg>,
    pub(crate) cooldown: Option<DurationArg>,
    pub(crate) client: Option<Expr>,
    pub(crate) guard: Option<Ident>,
    /// `crate = "path"`: where the runtime is, for a renamed dependency or a re-export.
    pub(crate) krate: Option<LitStr>,
    /// `mode = "read"` / `"write"`: a side of a read-write lock instead of a mutex.
    pub(crate) mode: Option<LitStr>,
    /// `permits = N`: take a permit of a semaphore of N permits instead of a lock.
    pub(crate) permits: Option<LitInt>,
}

/// Parses `= value` into `slot`, or fails at `keyword` when the argument was given before.
fn once<T>(
    input: ParseStream<'_>,
    slot: &mut Option<T>,
    keyword: Span,
    name: &str,
    parse: impl FnOnce(ParseStream<'_>) -> syn::Result<T>,
) -> syn::Result<()> {
    if slot.is_some() {
        return Err(syn::Error::new(
            keyword,
            format!("expected only a single `{name}` argument"),
        ));
    }
    input.parse::<Token![=]>()?;
    *slot = Some(parse(input)?);
    Ok(())
}

impl Parse for LockArgs {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let mut args = LockArgs::default();
        while !input.is_empty() {
            let lookahead = input.lookahead1();
            if lookahead.peek(kw::key) {
                let kw: kw::key = input.parse()?;
                once(input, &mut args.key, kw.span, "key", |i| i.parse())?;
            } else if lookahead.peek(kw::keys) {
                let kw: kw::keys = input.parse()?;
                once(input, &mut args.keys, kw.span, "keys", |i| {
                    let list;
                    let bracket = syn::bracketed!(list in i);
                    let items =
                        syn::punctuated::Punctuated::<LitStr, Token![,]>::parse_terminated(&list)?;
                    Ok((bracket.span.join(), items.into_iter().collect()))
                })?;
            } else if lookahead.peek(kw::ttl) {
                let kw: kw::ttl = input.parse()?;
                once(input, &mut args.ttl, kw.span, "ttl", |i| i.parse())?;
            } else if lookahead.peek(kw::wait) {
                let kw: kw::wait = input.parse()?;
                once(input, &mut args.wait, kw.span, "wait", |i| i.parse())?;
            } else if lookahead.peek(kw::retry) {
                let kw: kw::retry = input.parse()?;
                once(input, &mut args.retry, kw.span, "retry", |i| i.parse())?;
            } else if lookahead.peek(kw::on_busy) {
                let kw: kw::on_busy = input.parse()?;
                once(input, &mut args.on_busy, kw.span, "on_busy", |i| i.parse())?;
            } else if lookahead.peek(kw::hold_at_least) {
                let kw: kw::hold_at_least = input.parse()?;
                let name = "hold_at_least";
                once(input, &mut args.hold_at_least, kw.span, name, |i| i.parse())?;
            } else if lookahead.peek(kw::cooldown) {
                let kw: kw::cooldown = input.parse()?;
                once(input, &mut args.cooldown, kw.span, "cooldown", |i| {
                    i.parse()
                })?;
            } else if lookahead.peek(kw::client) {
                let kw: kw::client = input.parse()?;
                once(input, &mut args.client, kw.span, "client", |i| i.parse())?;
            } else if lookahead.peek(kw::guard) {
                let kw: kw::guard = input.parse()?;
                once(input, &mut args.guard, kw.span, "guard", |i| i.parse())?;
            } else if lookahead.peek(kw::mode) {
                let kw: kw::mode = input.parse()?;
                once(input, &mut args.mode, kw.span, "mode", |i| i.parse())?;
            } else if lookahead.peek(kw::permits) {
                let kw: kw::permits = input.parse()?;
                once(input, &mut args.permits, kw.span, "permits", |i| i.parse())?;
            } else if lookahead.peek(Token![crate]) {
                let kw: Token![crate] = input.parse()?;
                once(input, &mut args.krate, kw.span, "crate", |i| i.parse())?;
            } else {
                // Name the offending option, not only the ones that exist.
                let error = lookahead.error();
                if let Ok(name) = input.fork().call(syn::Ident::parse_any) {
                    return Err(syn::Error::new(
                        name.span(),
                        format!("unknown option `{name}`: {error}"),
                    ));
                }
                return Err(error);
            }
            if input.is_empty() {
                break;
            }
            input.parse::<Token![,]>()?;
        }
        Ok(args)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(tokens: &str) -> syn::Result<LockArgs> {
        syn::parse_str(tokens)
    }

    #[test]
    fn every_option_parses() {
        let args = parse(
            r#"key = "job:{id}", ttl = 10, wait = "5s", retry = "none", on_busy = "skip",
               hold_at_least = "1m", client = &self.locks, guard = g, permits = 3,"#,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(args.key.unwrap().value(), "job:{id}");
        assert!(matches!(args.ttl, Some(DurationArg::Secs(_))));
        assert!(matches!(args.wait, Some(DurationArg::Text(_))));
        assert_eq!(args.guard.unwrap().to_string(), "g");
        assert!(args.client.is_some());
        assert_eq!(args.permits.unwrap().base10_digits(), "3");
    }

    #[test]
    fn keys_parse_as_a_list() {
        let args =
            parse(r#"keys = ["a:{x}", "b:{y}",], ttl = 1"#).unwrap_or_else(|e| panic!("{e}"));
        let (_, keys) = args.keys.unwrap();
        let keys: Vec<String> = keys.iter().map(LitStr::value).collect();
        assert_eq!(keys, ["a:{x}", "b:{y}"]);
        assert!(parse(r#"keys = "a""#).is_err());
        assert!(parse(r#"keys = [1]"#).is_err());
    }

    #[test]
    fn repeats_and_unknown_names_are_rejected() {
        let repeated = parse(r#"key = "a", ttl = 1, ttl = 2"#).err().unwrap();
        assert_eq!(
            repeated.to_string(),
            "expected only a single `ttl` argument"
        );
        let unknown = parse(r#"key = "a", tll = 1"#).err().unwrap();
        assert!(
            unknown
                .to_string()
                .starts_with("unknown option `tll`: expected one of"),
            "{unknown}"
        );
        assert!(parse(r#"ttl = x"#).is_err());
        assert!(parse(r#"key "a""#).is_err());
    }
}
