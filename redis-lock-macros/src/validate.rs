//! Checking the parsed arguments against the function: every rejection is a
//! `syn::Error` on the offending tokens, and all of them are reported at once.

use proc_macro2::{Span, TokenStream};
use quote::{ToTokens, quote};
use syn::{Expr, FnArg, Ident, ItemFn, LitStr, Pat, ReturnType, Type};

use crate::args::{DurationArg, LockArgs};
use crate::duration::{self, Retry};
use crate::template::{self, Piece};

/// `redis_lock::MAX_TTL` in milliseconds: 365 days.
const MAX_TTL_MS: u64 = 365 * 24 * 3600 * 1000;

/// `redis_lock::MAX_PERMITS`.
const MAX_PERMITS: u32 = 10_000;
/// `redis_lock::MAX_LOCK_ALL`: most locks one multi-lock takes.
const MAX_LOCK_ALL: usize = 64;

/// The lock name: fixed, or formatted from the parameters on every call.
#[derive(Clone)]
pub(crate) enum Key {
    Fixed(LitStr),
    Formatted {
        /// A `format!` string with one `{}` per value.
        format: LitStr,
        /// `param.field...`, spanned at the key literal.
        values: Vec<TokenStream>,
    },
}

/// Everything the expansion needs, checked.
pub(crate) struct Plan {
    pub(crate) key: Key,
    /// `keys = [...]`: every lock of a multi-lock (`key` is then the first of them).
    pub(crate) all: Option<Vec<Key>>,
    /// The key template as written: the lock's label in metrics and spans (bounded
    /// cardinality: never the formatted name).
    pub(crate) label: LitStr,
    pub(crate) ttl_ms: Option<u64>,
    pub(crate) wait_ms: Option<u64>,
    pub(crate) retry: Option<Retry>,
    pub(crate) skip: bool,
    pub(crate) hold_ms: Option<u64>,
    pub(crate) cooldown_ms: Option<u64>,
    pub(crate) client: Option<Expr>,
    pub(crate) guard: Option<Ident>,
    /// The path the expansion names the runtime by: `crate = "…"` as written, else the name
    /// the caller's Cargo.toml gives `redis-lock-sync` (runtime.rs).
    pub(crate) krate: syn::Path,
    /// A side of a read-write lock; `None`: a mutex.
    pub(crate) mode: Option<Mode>,
    /// `permits = N`: a permit of a semaphore of N permits instead of a lock.
    pub(crate) permits: Option<u32>,
}

/// `mode = "read"` / `"write"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Read,
    Write,
}

/// Collects errors so that one compile reports every problem.
#[derive(Default)]
struct Errors(Option<syn::Error>);

impl Errors {
    fn push(&mut self, error: syn::Error) {
        match &mut self.0 {
            Some(all) => all.combine(error),
            None => self.0 = Some(error),
        }
    }

    fn spanned(&mut self, tokens: impl ToTokens, message: impl std::fmt::Display) {
        self.push(syn::Error::new_spanned(tokens, message));
    }

    /// `Some(value)` for `Ok`, and records the error for `Err`.
    fn take<T>(&mut self, result: Result<T, syn::Error>) -> Option<T> {
        result.map_err(|e| self.push(e)).ok()
    }
}

pub(crate) fn check(args: LockArgs, func: &ItemFn) -> syn::Result<Plan> {
    let mut errors = Errors::default();
    let sig = &func.sig;
    if let Some(asyncness) = &sig.asyncness {
        errors.spanned(
            asyncness,
            "`#[distributed_lock]` does not support `async fn`: redis-lock is blocking; call a \
             locked blocking function from a blocking thread instead",
        );
    }
    if let Some(constness) = &sig.constness {
        errors.spanned(
            constness,
            "`#[distributed_lock]` cannot lock a `const fn`: taking a lock talks to Redis at \
             run time",
        );
    }

    let skip = match &args.on_busy {
        None => false,
        Some(lit) => match lit.value().as_str() {
            "error" => false,
            "skip" => true,
            other => {
                errors.spanned(
                    lit,
                    format!("unknown `on_busy` value {other:?}: expected \"error\" or \"skip\""),
                );
                false
            }
        },
    };
    check_return_type(&mut errors, func, skip);

    let params = parameter_names(func);
    let mut all = None;
    let key = match (&args.key, &args.keys) {
        (Some(lit), Some(_)) => {
            errors.spanned(
                lit,
                "give either `key = \"...\"` (one lock) or `keys = [...]` (several, taken \
                 together), not both",
            );
            None
        }
        (None, Some((span, lits))) if lits.is_empty() => {
            errors.push(syn::Error::new(
                *span,
                "`keys` is empty: name the locks to take together, such as \
                 `keys = [\"account:{from}\", \"account:{to}\"]`",
            ));
            None
        }
        (None, Some((span, lits))) if lits.len() > MAX_LOCK_ALL => {
            errors.push(syn::Error::new(
                *span,
                format!(
                    "`keys` names {} locks; at most {MAX_LOCK_ALL} are taken together \
                     (`redis_lock::MAX_LOCK_ALL`)",
                    lits.len()
                ),
            ));
            None
        }
        (None, Some((_, lits))) => {
            let keys: Vec<Key> = lits
                .iter()
                .filter_map(|lit| errors.take(key(lit, &params, &sig.ident)))
                .collect();
            let mut seen = std::collections::HashSet::new();
            for lit in lits {
                if !seen.insert(lit.value()) {
                    errors.spanned(lit, "this key is named twice in `keys`");
                }
            }
            if keys.len() == lits.len() {
                let first = keys.first().cloned();
                all = Some(keys);
                first
            } else {
                None
            }
        }
        (None, None) => {
            errors.push(missing_key());
            None
        }
        (Some(lit), None) => errors.take(key(lit, &params, &sig.ident)),
    };
    if let (Some(_), Some(mode)) = (&args.keys, &args.mode) {
        errors.spanned(
            mode,
            "`mode` does not go with `keys`: a multi-lock takes mutexes",
        );
    }
    if let (Some(_), Some(hold)) = (&args.keys, &args.hold_at_least) {
        errors.spanned(
            hold,
            "`hold_at_least` does not go with `keys`: a multi-lock has no minimum hold",
        );
    }
    // The label: the template(s) as written.
    let label = match (&args.key, &args.keys) {
        (Some(lit), _) => Some(lit.clone()),
        (None, Some((_, lits))) if !lits.is_empty() => Some(LitStr::new(
            &lits.iter().map(LitStr::value).collect::<Vec<_>>().join(","),
            lits[0].span(),
        )),
        _ => None,
    };

    let ttl_ms = args
        .ttl
        .as_ref()
        .and_then(|ttl| errors.take(duration_ms(ttl, "ttl")));
    if let (Some(0), Some(ttl)) = (ttl_ms, &args.ttl) {
        errors.spanned(
            ttl,
            "the ttl is zero: the lock would expire at once; give whole seconds (`ttl = 10`) or \
             a duration such as `ttl = \"500ms\"`",
        );
    }
    if let (Some(ms), Some(ttl)) = (ttl_ms, &args.ttl)
        && ms > MAX_TTL_MS
    {
        errors.spanned(
            ttl,
            "the ttl is longer than 365 days (`redis_lock::MAX_TTL`)",
        );
    }
    let wait_ms = args
        .wait
        .as_ref()
        .and_then(|wait| errors.take(duration_ms(wait, "wait")));
    let hold_ms = args
        .hold_at_least
        .as_ref()
        .and_then(|hold| errors.take(duration_ms(hold, "hold_at_least")));
    if let (Some(ms), Some(hold)) = (hold_ms, &args.hold_at_least)
        && ms > MAX_TTL_MS
    {
        errors.spanned(
            hold,
            "`hold_at_least` is longer than 365 days (`redis_lock::MAX_TTL`)",
        );
    }
    let cooldown_ms = args
        .cooldown
        .as_ref()
        .and_then(|cooldown| errors.take(duration_ms(cooldown, "cooldown")));
    if let (Some(ms), Some(cooldown)) = (cooldown_ms, &args.cooldown) {
        if ms == 0 {
            errors.spanned(
                cooldown,
                "the cooldown is zero: leave `cooldown` out for none, or give a duration such \
                 as `cooldown = \"30s\"`",
            );
        } else if ms > MAX_TTL_MS {
            errors.spanned(
                cooldown,
                "`cooldown` is longer than 365 days (`redis_lock::MAX_TTL`)",
            );
        }
    }
    let mode = args
        .mode
        .as_ref()
        .and_then(|lit| match lit.value().as_str() {
            "read" => Some(Mode::Read),
            "write" => Some(Mode::Write),
            other => {
                errors.spanned(
                    lit,
                    format!(
                        "unknown `mode` value {other:?}: expected \"read\" (a shared lock) or \
                     \"write\" (exclusive); leave `mode` out for a mutex"
                    ),
                );
                None
            }
        });
    if let (Some(_), Some(hold)) = (&args.mode, &args.hold_at_least) {
        errors.spanned(
            hold,
            "`hold_at_least` is not available for read-write locks (`mode`)",
        );
    }
    let retry = args.retry.as_ref().and_then(|lit| {
        duration::parse_retry(&lit.value())
            .map_err(|msg| errors.spanned(lit, msg))
            .ok()
    });

    if let Some(guard) = &args.guard
        && params.iter().any(|p| guard == p)
    {
        errors.spanned(
            guard,
            format!(
                "`guard = {guard}` would hide the parameter `{guard}` from the body: choose \
                 another name"
            ),
        );
    }

    let krate = match &args.krate {
        None => Some(crate::runtime::lookup()),
        Some(lit) => lit
            .parse::<syn::Path>()
            .map_err(|_| {
                errors.spanned(
                    lit,
                    format!(
                        "`crate = {:?}` is not a path: name the redis-lock crate as your \
                         Cargo.toml does, such as `crate = \"locks\"` or \
                         `crate = \"::my_app::locks\"`",
                        lit.value()
                    ),
                )
            })
            .ok(),
    };

    let permits = check_permits(&mut errors, &args);

    match (errors.0, key.zip(label)) {
        (Some(error), _) => Err(error),
        (None, Some((key, label))) => Ok(Plan {
            key,
            all,
            label,
            ttl_ms,
            wait_ms,
            retry,
            skip,
            hold_ms,
            cooldown_ms,
            client: args.client,
            guard: args.guard,
            // Only a `crate = "..."` that is not a path leaves it unset, and that is an error.
            krate: krate.unwrap_or_else(crate::runtime::lookup),
            mode,
            permits,
        }),
        (None, None) => Err(missing_key()),
    }
}

/// `permits = N`: between 1 and `MAX_PERMITS`, and without the options that keep a released
/// lock taken (a permit is given back at once).
fn check_permits(errors: &mut Errors, args: &LockArgs) -> Option<u32> {
    let lit = args.permits.as_ref()?;
    // A type suffix (`3u32`) is still a count; any other (`3ms`) is nonsense `base10_parse`
    // would ignore.
    let counted = matches!(lit.suffix(), "" | "u8" | "u16" | "u32" | "u64" | "usize");
    let permits = match lit.base10_parse::<u32>() {
        _ if !counted => {
            errors.spanned(
                lit,
                format!("`permits = {lit}` is not a number of permits: write a whole number"),
            );
            None
        }
        Ok(0) => {
            errors.spanned(
                lit,
                "`permits = 0`: a semaphore needs at least one permit; leave `permits` out for \
                 a lock",
            );
            None
        }
        Ok(n) if n > MAX_PERMITS => {
            errors.spanned(
                lit,
                format!("`permits = {n}` is more than {MAX_PERMITS} (`redis_lock::MAX_PERMITS`)"),
            );
            None
        }
        Ok(n) => Some(n),
        Err(_) => {
            errors.spanned(
                lit,
                format!("`permits` is a whole number from 1 to {MAX_PERMITS}"),
            );
            None
        }
    };
    if let Some(hold) = &args.hold_at_least {
        errors.spanned(
            hold,
            "`hold_at_least` is not available with `permits`: a permit is given back at once",
        );
    }
    if let Some(cooldown) = &args.cooldown {
        errors.spanned(
            cooldown,
            "`cooldown` is not available with `permits`: a permit is given back at once",
        );
    }
    if let Some(mode) = &args.mode {
        errors.spanned(
            mode,
            "`mode` is for read-write locks and `permits` for semaphores: use one of them",
        );
    }
    if args.keys.is_some() {
        errors.spanned(
            lit,
            "`permits` does not go with `keys`: a multi-lock takes locks, not permits",
        );
    }
    permits
}

fn missing_key() -> syn::Error {
    syn::Error::new(
        Span::call_site(),
        "missing `key = \"...\"`: the name of the lock, such as `key = \"report\"` or \
         `key = \"invoice:{id}\"`",
    )
}

impl ToTokens for DurationArg {
    fn to_tokens(&self, tokens: &mut TokenStream) {
        match self {
            DurationArg::Secs(lit) => lit.to_tokens(tokens),
            DurationArg::Text(lit) => lit.to_tokens(tokens),
        }
    }
}

fn duration_ms(arg: &DurationArg, name: &str) -> syn::Result<u64> {
    match arg {
        // `ttl = 500ms` lexes as the integer 500 with the suffix `ms`, and `base10_parse`
        // ignores suffixes: without this, the unit would be dropped and 500 seconds taken.
        DurationArg::Secs(lit) if !lit.suffix().is_empty() => Err(syn::Error::new_spanned(
            lit,
            format!(
                "`{name} = {lit}`: a unit goes in a string (`{name} = \"{digits}{suffix}\"`); \
                 a bare integer is whole seconds",
                digits = lit.base10_digits(),
                suffix = lit.suffix(),
            ),
        )),
        DurationArg::Secs(lit) => {
            let too_long = || {
                syn::Error::new_spanned(
                    lit,
                    // Too many seconds to count in milliseconds: past any limit. A wait
                    // is not bounded by `MAX_TTL` (only by the clock), so it is not named.
                    if name == "wait" {
                        format!("`wait` is too long: {lit} seconds do not fit in milliseconds")
                    } else {
                        format!("`{name}` is longer than 365 days (`redis_lock::MAX_TTL`)")
                    },
                )
            };
            match lit.base10_parse::<u64>() {
                Ok(secs) => secs.checked_mul(1000).ok_or_else(too_long),
                // Digits that do not fit are a number, just far too large.
                Err(_) if lit.base10_digits().bytes().all(|b| b.is_ascii_digit()) => {
                    Err(too_long())
                }
                Err(_) => Err(syn::Error::new_spanned(
                    lit,
                    format!("`{name}` is not a whole number of seconds"),
                )),
            }
        }
        DurationArg::Text(lit) => duration::parse_ms(&lit.value())
            .map_err(|msg| syn::Error::new_spanned(lit, format!("`{name}`: {msg}"))),
    }
}

/// Names a key template may use: the parameters bound by the function's patterns, and
/// `self` for methods.
fn parameter_names(func: &ItemFn) -> Vec<Ident> {
    fn bound(pat: &Pat, out: &mut Vec<Ident>) {
        match pat {
            Pat::Ident(p) => {
                out.push(p.ident.clone());
                if let Some((_, sub)) = &p.subpat {
                    bound(sub, out);
                }
            }
            Pat::Tuple(p) => p.elems.iter().for_each(|e| bound(e, out)),
            Pat::TupleStruct(p) => p.elems.iter().for_each(|e| bound(e, out)),
            Pat::Struct(p) => p.fields.iter().for_each(|f| bound(&f.pat, out)),
            Pat::Slice(p) => p.elems.iter().for_each(|e| bound(e, out)),
            Pat::Reference(p) => bound(&p.pat, out),
            Pat::Paren(p) => bound(&p.pat, out),
            Pat::Type(p) => bound(&p.pat, out),
            _ => {}
        }
    }
    let mut names = Vec::new();
    for input in &func.sig.inputs {
        match input {
            FnArg::Receiver(r) => names.push(Ident::new("self", r.self_token.span)),
            FnArg::Typed(t) => bound(&t.pat, &mut names),
        }
    }
    names
}

fn key(lit: &LitStr, params: &[Ident], function: &Ident) -> syn::Result<Key> {
    let text = lit.value();
    if text.is_empty() {
        return Err(syn::Error::new_spanned(
            lit,
            "the key is empty: give the lock a name, such as `key = \"report\"`",
        ));
    }
    let pieces = template::parse(&text).map_err(|msg| syn::Error::new_spanned(lit, msg))?;
    let span = lit.span();
    let mut format = String::new();
    let mut values = Vec::new();
    for piece in pieces {
        match piece {
            Piece::Text(t) => format.push_str(&t.replace('{', "{{").replace('}', "}}")),
            Piece::Value(p) => {
                if !params.iter().any(|name| *name == p.root) {
                    let known = if params.is_empty() {
                        format!("`{function}` has no parameters")
                    } else {
                        let list: Vec<String> =
                            params.iter().map(|name| format!("`{name}`")).collect();
                        format!("the parameters of `{function}` are {}", list.join(", "))
                    };
                    return Err(syn::Error::new_spanned(
                        lit,
                        format!(
                            "`{{{}}}` in the key is not a parameter of `{function}`: {known}",
                            p.root
                        ),
                    ));
                }
                let root = if p.root == "self" {
                    quote::quote_spanned!(span=> self)
                } else {
                    Ident::new(&p.root, span).into_token_stream()
                };
                let mut value = root;
                for field in &p.fields {
                    let mut member: syn::Member = syn::parse_str(field).map_err(|_| {
                        syn::Error::new_spanned(
                            lit,
                            format!("`{field}` in the key is not a field name or tuple index"),
                        )
                    })?;
                    match &mut member {
                        syn::Member::Named(ident) => ident.set_span(span),
                        syn::Member::Unnamed(index) => index.span = span,
                    }
                    value = quote!(#value.#member);
                }
                format.push_str("{}");
                values.push(value);
            }
        }
    }
    if values.is_empty() {
        return Ok(Key::Fixed(LitStr::new(
            &format.replace("{{", "{").replace("}}", "}"),
            span,
        )));
    }
    Ok(Key::Formatted {
        format: LitStr::new(&format, span),
        values,
    })
}

/// What a return type can do, as far as the syntax tells; the rest is left to the trait
/// bounds in `redis_lock::__private`, whose messages name the same ways out.
enum Shape {
    Unit,
    Option,
    /// `Result<..>`, or a name that may be an alias of one.
    Maybe,
    /// Certainly neither `()`, `Option` nor `Result`.
    Other,
}

fn shape(ty: &Type) -> Shape {
    const NOT_RESULT: &[&str] = &[
        "bool", "char", "str", "String", "u8", "u16", "u32", "u64", "u128", "usize", "i8", "i16",
        "i32", "i64", "i128", "isize", "f32", "f64", "Vec", "Box",
    ];
    match ty {
        Type::Tuple(t) if t.elems.is_empty() => Shape::Unit,
        Type::Paren(t) => shape(&t.elem),
        Type::Group(t) => shape(&t.elem),
        Type::Path(p) if p.qself.is_none() => match p.path.segments.last() {
            Some(last) if last.ident == "Option" => Shape::Option,
            Some(last) if NOT_RESULT.iter().any(|n| last.ident == n) => Shape::Other,
            _ => Shape::Maybe,
        },
        Type::Path(_) | Type::Macro(_) | Type::Infer(_) | Type::Verbatim(_) => Shape::Maybe,
        _ => Shape::Other,
    }
}

fn check_return_type(errors: &mut Errors, func: &ItemFn, skip: bool) {
    let sig = &func.sig;
    let (ty, shape) = match &sig.output {
        ReturnType::Default => (None, Shape::Unit),
        ReturnType::Type(_, ty) => (Some(ty), shape(ty)),
    };
    let ways_out = "return `Result<T, E>` with `E: From<redis_lock::Error>`, or add \
                    `on_busy = \"skip\"` to skip the call when the lock is busy";
    match (skip, shape, ty) {
        (false, Shape::Unit, None) => errors.spanned(
            &sig.ident,
            format!(
                "`{}` returns nothing, so a lock failure could not reach its caller: {ways_out}",
                sig.ident
            ),
        ),
        (false, Shape::Unit, Some(ty)) => errors.spanned(
            ty,
            format!("`()` cannot carry a lock failure to the caller: {ways_out}"),
        ),
        (false, Shape::Option, Some(ty)) => errors.spanned(
            ty,
            "`Option` cannot carry a lock failure to the caller: return \
             `Result<Option<T>, E>` with `E: From<redis_lock::Error>`, or add \
             `on_busy = \"skip\"` to return `None` when the lock is busy",
        ),
        (false, Shape::Other, Some(ty)) => errors.spanned(
            ty,
            format!("this type cannot carry a lock failure to the caller: {ways_out}"),
        ),
        (true, Shape::Other, Some(ty)) => errors.spanned(
            ty,
            "`on_busy = \"skip\"` needs a return type a skipped call can produce: `()`, \
             `Option<T>`, `Result<(), E>` or `Result<Option<T>, E>`",
        ),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(args: &str, func: &str) -> syn::Result<Plan> {
        check(syn::parse_str(args)?, &syn::parse_str(func)?)
    }

    fn message(args: &str, func: &str) -> String {
        match plan(args, func) {
            Ok(_) => panic!("accepted {args} on {func}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn a_unit_outside_a_string_is_refused_not_dropped() {
        let ok = "fn f() -> Result<(), E> {}";
        for (args, hint) in [
            ("key = \"a\", ttl = 500ms", "`ttl = \"500ms\"`"),
            ("key = \"a\", wait = 2ms", "`wait = \"2ms\"`"),
            (
                "key = \"a\", hold_at_least = 1h",
                "`hold_at_least = \"1h\"`",
            ),
            ("key = \"a\", cooldown = 2m", "`cooldown = \"2m\"`"),
            ("key = \"a\", ttl = 5u64", "`ttl = \"5u64\"`"),
        ] {
            let m = message(args, ok);
            assert!(
                m.contains(hint) && m.contains("whole seconds"),
                "{args}: {m}"
            );
        }
        assert!(message("key = \"a\", permits = 3ms", ok).contains("not a number of permits"));
        assert!(plan("key = \"a\", permits = 3u32", ok).is_ok());
        assert!(plan("key = \"a\", ttl = 5, wait = \"500ms\"", ok).is_ok());
    }

    #[test]
    fn keys_format_parameters_and_fields() {
        let p = plan(
            r#"key = "a:{x}:{self.y.0}:{{z}}""#,
            "fn f(&self, x: u32) -> Result<(), E> {}",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        match p.key {
            Key::Formatted { format, values } => {
                assert_eq!(format.value(), "a:{}:{}:{{z}}");
                let values: Vec<String> = values.iter().map(|v| v.to_string()).collect();
                assert_eq!(values, ["x", "self . y . 0"]);
            }
            Key::Fixed(_) => panic!("expected a formatted key"),
        }
        let p = plan(r#"key = "{{fixed}}""#, "fn f() -> Result<(), E> {}").unwrap();
        assert!(matches!(p.key, Key::Fixed(lit) if lit.value() == "{fixed}"));
    }

    #[test]
    fn parameters_in_patterns_count() {
        let p = plan(
            r#"key = "{a}{b}{c}""#,
            "fn f((a, b): (u8, u8), S { c, .. }: S) -> Result<(), E> {}",
        );
        assert!(p.is_ok());
    }

    #[test]
    fn modes_take_a_side_of_a_read_write_lock() {
        let ok = "fn f() -> Result<(), E> {}";
        assert_eq!(
            plan(r#"key = "a", mode = "read""#, ok).unwrap().mode,
            Some(Mode::Read)
        );
        assert_eq!(
            plan(r#"key = "a", mode = "write""#, ok).unwrap().mode,
            Some(Mode::Write)
        );
        assert_eq!(plan(r#"key = "a""#, ok).unwrap().mode, None);
        assert!(message(r#"key = "a", mode = "shared""#, ok).contains("unknown `mode` value"));
        assert!(
            message(r#"key = "a", mode = "read", hold_at_least = 5"#, ok)
                .contains("not available for read-write locks")
        );
    }

    #[test]
    fn rejections_name_the_problem() {
        let ok = "fn f(id: u32) -> Result<(), E> {}";
        assert!(message(r#"key = "a:{idd}""#, ok).contains("the parameters of `f` are `id`"));
        assert!(
            message(r#"key = "a:{x}""#, "fn f() -> Result<(), E> {}").contains("no parameters")
        );
        assert!(message(r#"key = """#, ok).contains("empty"));
        assert!(message(r#"ttl = 1"#, ok).contains("missing `key"));
        assert!(message(r#"key = "a", ttl = 0"#, ok).contains("zero"));
        assert!(message(r#"key = "a", ttl = "0ms""#, ok).contains("zero"));
        assert!(message(r#"key = "a", ttl = "9000h""#, ok).contains("365 days"));
        assert!(message(r#"key = "a", wait = "5 s""#, ok).contains("unknown unit"));
        assert!(
            plan(r#"key = "a", wait = "1.5s""#, ok).is_ok(),
            "the CLI's grammar"
        );
        assert!(
            message(r#"key = "a", ttl = 99999999999999999999999"#, ok).contains("365 days"),
            "an overflowing ttl says so"
        );
        let wait = message(r#"key = "a", wait = 99999999999999999999999"#, ok);
        assert!(
            wait.contains("too long") && !wait.contains("MAX_TTL"),
            "a wait has no 365-day limit: {wait}"
        );
        assert!(message(r#"key = "a", retry = "poll""#, ok).contains("unknown retry"));
        assert!(message(r#"key = "a", on_busy = "wait""#, ok).contains("on_busy"));
        assert!(message(r#"key = "a", guard = id"#, ok).contains("hide the parameter"));
        assert!(message(r#"key = "a", permits = 0"#, ok).contains("at least one permit"));
        assert!(message(r#"key = "a", permits = 10001"#, ok).contains("more than 10000"));
        assert!(message(r#"key = "a", permits = 2, cooldown = 1"#, ok).contains("given back"));
        assert!(
            message(r#"key = "a", permits = 2, mode = "read""#, ok).contains("use one of them")
        );
        assert!(message(r#"keys = ["a", "b"], permits = 2"#, ok).contains("not permits"));
        assert!(message(r#"keys = ["a", "b"], mode = "read""#, ok).contains("takes mutexes"));
        assert_eq!(
            plan(r#"key = "a", permits = 3"#, ok).unwrap().permits,
            Some(3)
        );
        assert!(message(r#"key = "a""#, "fn f() {}").contains("returns nothing"));
        assert!(message(r#"key = "a""#, "fn f() -> Option<u8> {}").contains("Option"));
        assert!(message(r#"key = "a""#, "async fn f() -> Result<(), E> {}").contains("async"));
        assert!(message(r#"key = "a""#, "const fn f() -> Result<(), E> {}").contains("const"));
        let skip = r#"key = "a", on_busy = "skip""#;
        assert!(message(skip, "fn f() -> u32 {}").contains("skipped call"));
        assert!(plan(skip, "fn f() {}").is_ok());
        assert!(plan(skip, "fn f() -> Option<u8> {}").is_ok());
        assert!(plan(skip, "fn f() -> Result<(), E> {}").is_ok());
    }

    #[test]
    fn all_errors_are_reported_at_once() {
        let e = plan(r#"key = "", ttl = 0"#, "async fn f() {}")
            .err()
            .unwrap();
        assert_eq!(e.into_iter().count(), 4);
    }
}
