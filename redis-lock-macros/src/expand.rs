//! Writing the locked function: the signature as written, the lock taken first, the body
//! run in a closure of its own, the lock released (and checked) last.

use proc_macro2::{Literal, Span, TokenStream, TokenTree};
use quote::{ToTokens, format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{AttrStyle, ItemFn, ReturnType};

use crate::duration::Retry;
use crate::validate::{Key, Mode, Plan};

/// The runtime's path at `span`, so that a diagnostic about an expression built around it
/// points at the user's tokens, not at the whole attribute. An absolute path (`::name`: the
/// default, or a `crate = "::..."`) starts with `::`, which sets where such an expression
/// starts, so its names keep their own spans: a name that cannot be found is then reported
/// once, at the attribute (or at `crate = "..."`), not once per expression built around it.
fn respan(krate: &syn::Path, span: Span) -> TokenStream {
    let absolute = krate.leading_colon.is_some();
    krate
        .to_token_stream()
        .into_iter()
        .map(|mut tt| {
            if !(absolute && matches!(tt, TokenTree::Ident(_))) {
                tt.set_span(span);
            }
            tt
        })
        .collect()
}

fn millis(ms: u64) -> TokenStream {
    let ms = Literal::u64_unsuffixed(ms);
    quote!(::core::time::Duration::from_millis(#ms))
}

fn options(plan: &Plan) -> TokenStream {
    let krate = &plan.krate;
    let label = &plan.label;
    let mut options = quote!(#krate::LockOptions::new().label(#label));
    if let Some(ms) = plan.ttl_ms {
        let d = millis(ms);
        options.extend(quote!(.ttl(#d)));
    }
    if let Some(ms) = plan.wait_ms {
        let d = millis(ms);
        options.extend(quote!(.wait(#d)));
    }
    if let Some(retry) = &plan.retry {
        let strategy = match retry {
            Retry::Notify => quote!(#krate::RetryStrategy::notify()),
            Retry::None => quote!(#krate::RetryStrategy::none()),
            Retry::Fixed(ms) => {
                let d = millis(*ms);
                quote!(#krate::RetryStrategy::fixed(#d))
            }
            Retry::Exponential { initial, max } => {
                let (initial, max) = (millis(*initial), millis(*max));
                quote!(#krate::RetryStrategy::exponential(#initial, #max))
            }
        };
        options.extend(quote!(.retry(#strategy)));
    }
    if let Some(ms) = plan.hold_ms {
        let d = millis(ms);
        options.extend(quote!(.hold_at_least(#d)));
    }
    if let Some(ms) = plan.cooldown_ms {
        let d = millis(ms);
        options.extend(quote!(.cooldown(#d)));
    }
    match plan.mode {
        Some(Mode::Read) => options.extend(quote!(.mode(#krate::LockMode::Read))),
        Some(Mode::Write) => options.extend(quote!(.mode(#krate::LockMode::Write))),
        None => {}
    }
    options
}

/// `true` when `tokens` mention `impl`: such a type cannot be written outside a signature.
fn mentions_impl(tokens: TokenStream) -> bool {
    tokens.into_iter().any(|tt| match tt {
        TokenTree::Ident(ident) => ident == "impl",
        TokenTree::Group(group) => mentions_impl(group.stream()),
        _ => false,
    })
}

/// `ty` with every `impl Trait` in it replaced by `_`, so that it can be named in an
/// expression (where `impl Trait` cannot be written).
fn infer_impl(ty: &syn::Type) -> syn::Type {
    use syn::{GenericArgument, PathArguments, Type};
    let mut ty = ty.clone();
    fn walk(ty: &mut Type) {
        match ty {
            Type::ImplTrait(t) => {
                let span = t.impl_token.span;
                *ty = syn::parse_quote_spanned!(span=> _);
            }
            Type::Path(p) => {
                for seg in &mut p.path.segments {
                    if let PathArguments::AngleBracketed(args) = &mut seg.arguments {
                        for arg in &mut args.args {
                            if let GenericArgument::Type(t) = arg {
                                walk(t);
                            }
                        }
                    }
                }
            }
            Type::Reference(r) => walk(&mut r.elem),
            Type::Tuple(t) => t.elems.iter_mut().for_each(walk),
            Type::Array(a) => walk(&mut a.elem),
            Type::Slice(s) => walk(&mut s.elem),
            Type::Paren(p) => walk(&mut p.elem),
            Type::Group(g) => walk(&mut g.elem),
            _ => {}
        }
    }
    walk(&mut ty);
    ty
}

/// The function with the lock around its body.
pub(crate) fn wrap(plan: Plan, func: ItemFn) -> TokenStream {
    let krate = plan.krate.clone();
    let ItemFn {
        attrs,
        vis,
        sig,
        block,
        ..
    } = func;
    let (outer, inner): (Vec<_>, Vec<_>) = attrs
        .into_iter()
        .partition(|attr| matches!(attr.style, AttrStyle::Outer));

    // Hidden from the body (and the key and client expressions) by hygiene.
    let held = format_ident!("__redis_lock_held", span = Span::mixed_site());
    let ret = format_ident!("__redis_lock_ret", span = Span::mixed_site());

    // The return type, where it can be written in an expression: it is named as the type
    // argument of `enter` so that an unmet bound on it (`E: From<redis_lock::Error>`, what a
    // skipped call returns) is reported on it, and it is the return type of the closure that
    // runs the body, so the body type-checks as before (coercions, `?` conversions).
    let ret_ty: Option<TokenStream> = match &sig.output {
        ReturnType::Default => Some(quote!(())),
        ReturnType::Type(_, ty) if !mentions_impl(ty.to_token_stream()) => {
            Some(ty.to_token_stream())
        }
        ReturnType::Type(..) => None,
    };
    let ret_span = match &sig.output {
        ReturnType::Type(_, ty) => ty.span(),
        ReturnType::Default => sig.ident.span(),
    };

    // A `&str` (a `&String` for a template, coerced where it is passed).
    let key_expr = |key: &Key| match key {
        Key::Fixed(lit) => lit.to_token_stream(),
        Key::Formatted { format, values } => {
            let krate = respan(&krate, format.span());
            quote_spanned!(format.span()=> &#krate::__private::format!(#format, #(#values),*))
        }
    };
    let key = match &plan.all {
        None => key_expr(&plan.key),
        Some(keys) => {
            let keys = keys.iter().map(key_expr);
            quote!(&[#(::core::convert::AsRef::<str>::as_ref(#keys)),*][..])
        }
    };
    let client = match &plan.client {
        Some(expr) => {
            let krate = respan(&krate, expr.span());
            quote_spanned!(expr.span()=> #krate::__private::client(#expr))
        }
        None => quote!(#krate::__private::default_client()),
    };
    let function = sig.ident.to_string();
    let function = quote!(::core::concat!(::core::module_path!(), "::", #function));
    let options = options(&plan);
    let enter = if plan.skip {
        quote_spanned!(ret_span=> enter_or_skip)
    } else {
        quote_spanned!(ret_span=> enter)
    };
    // What is taken: one lock, a semaphore's permit, or every lock of `keys` (`validate`
    // refuses `permits` with `keys`).
    let target = match (plan.permits, plan.all.is_some()) {
        (Some(n), _) => {
            let n = Literal::u32_unsuffixed(n);
            quote!(#krate::__private::Target::Permit(#key, #n))
        }
        (None, true) => quote!(#krate::__private::Target::All(#key)),
        (None, false) => quote!(#krate::__private::Target::Lock(#key)),
    };
    // With `impl Trait` in it, the type is named with `_` in those places: the rest (an
    // error type that lacks `From<redis_lock::Error>`, say) is still checked on it.
    let named = ret_ty.clone().or_else(|| match &sig.output {
        ReturnType::Type(_, ty) => Some(infer_impl(ty).to_token_stream()),
        ReturnType::Default => None,
    });
    let turbofish = named.as_ref().map(|ty| quote_spanned!(ret_span=> ::<#ty>));
    let take = quote! {
        let #held = match #krate::__private::#enter #turbofish(#client, #target, #options, #function) {
            ::core::ops::ControlFlow::Continue(#held) => #held,
            ::core::ops::ControlFlow::Break(#ret) => return #ret,
        };
    };

    let bind_guard = plan.guard.as_ref().map(|name| {
        if plan.all.is_some() {
            quote!(let #name: &#krate::MultiGuard = #held.multi_guard();)
        } else {
            quote!(let #name: &#krate::LockGuard = #held.guard();)
        }
    });

    let closure_ret = ret_ty.map(|ty| quote!(-> #ty));
    let run = quote! {
        #krate::__private::finish(
            #krate::__private::call_once(move || #closure_ret #block),
            #held,
        )
    };

    quote! {
        #(#outer)*
        #vis #sig {
            #(#inner)*
            #take
            #bind_guard
            #run
        }
    }
}

/// The compile errors, and the function as written, so that its callers do not get errors
/// of their own on top.
pub(crate) fn fallback(item: TokenStream, error: &syn::Error) -> TokenStream {
    let mut out = error.to_compile_error();
    out.extend(item);
    out
}
