//! Where the expansion finds its runtime, the `redis-lock-sync` library: `crate = "..."` as
//! written (validate.rs), else under the name the calling package's Cargo.toml gives it, read
//! with `proc-macro-crate`, else `::redis_lock`.

use proc_macro_crate::{FoundCrate, crate_name};
use proc_macro2::Span;

/// The package the expansion calls into.
const PACKAGE: &str = "redis-lock-sync";
/// Its library's name (`[lib] name`): what Cargo calls it in code unless the dependency is
/// renamed.
const LIB: &str = "redis_lock";
/// What `proc-macro-crate` answers for a dependency that is not renamed, or for the
/// package's own integration tests: it names the package, not its library.
const PACKAGE_AS_NAME: &str = "redis_lock_sync";

/// The runtime's path when the attribute has no `crate = "..."`: `::name`, absolute, with
/// `name` at the attribute's span, so that if it is wrong, the compiler's one error (cannot
/// find `name`) points at the attribute, whose documentation tells what to write there.
pub(crate) fn lookup() -> syn::Path {
    let mut name = syn::parse_str::<syn::Ident>(&name_in(crate_name(PACKAGE)))
        .unwrap_or_else(|_| syn::Ident::new(LIB, Span::call_site()));
    name.set_span(Span::call_site());
    syn::parse_quote!(::#name)
}

/// The name the calling crate knows the library by, from what `proc-macro-crate` found in
/// its Cargo.toml.
fn name_in(found: Result<FoundCrate, proc_macro_crate::Error>) -> String {
    match found {
        // A renamed dependency (`locks = { package = "redis-lock-sync" }`, also through
        // `[workspace.dependencies]`): Cargo names it by its key, with `-` as `_`.
        Ok(FoundCrate::Name(name)) if name != PACKAGE_AS_NAME => name,
        // A dependency under its own name (`redis-lock-sync = "0.1"`): Cargo names it by its
        // library, `redis_lock`. The package's own integration tests get the same answer and
        // the same name. (A dependency renamed to its own name, `redis_lock_sync = { package =
        // "redis-lock-sync" }`, cannot be told apart from this: it needs
        // `crate = "redis_lock_sync"`.)
        Ok(FoundCrate::Name(_)) => LIB.to_owned(),
        // This package's own targets: its binary, examples, benches and doctests are crates
        // that link the library as `redis_lock` (`crate::` would be themselves), and the
        // library names itself `redis_lock` too (`extern crate self as redis_lock`).
        Ok(FoundCrate::Itself) => LIB.to_owned(),
        // Not in the manifest (reached through a re-export, or a build without Cargo), or the
        // manifest could not be read: the name the library has when nothing renames it, as
        // before the lookup existed. If it is wrong, `crate = "..."` says where it is.
        Err(_) => LIB.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quote::ToTokens;

    #[test]
    fn a_renamed_dependency_is_named_by_its_key() {
        let found = Ok(FoundCrate::Name("locks".to_owned()));
        assert_eq!(name_in(found), "locks");
        let found = Ok(FoundCrate::Name("redis_lock".to_owned()));
        assert_eq!(name_in(found), "redis_lock");
    }

    #[test]
    fn a_dependency_under_its_own_name_is_its_library() {
        let found = Ok(FoundCrate::Name("redis_lock_sync".to_owned()));
        assert_eq!(name_in(found), "redis_lock");
    }

    #[test]
    fn the_package_itself_and_failures_use_the_library_name() {
        assert_eq!(name_in(Ok(FoundCrate::Itself)), "redis_lock");
        let missing = Err(proc_macro_crate::Error::CargoManifestDirNotSet);
        assert_eq!(name_in(missing), "redis_lock");
    }

    #[test]
    fn the_lookup_is_absolute() {
        // This crate's own manifest names the library `redis-lock` (a dev-dependency).
        let path = lookup().to_token_stream().to_string().replace(' ', "");
        assert_eq!(path, "::redis_lock");
    }
}
