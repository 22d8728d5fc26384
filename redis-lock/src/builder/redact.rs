//! Passwords kept out of what a client shows: URLs as logs, `Debug` and errors print them.

/// The URL with its password replaced by `***`, for logs, `Debug` and errors: the password of
/// the user information (`redis://user:secret@host/`), also when it holds a `/`, `?` or `#`
/// that ends the authority early (such a URL does not parse, and its error shows it), and
/// the `pass` query parameter that redis-rs reads for Unix sockets
/// (`redis+unix:///path?pass=secret`).
pub(crate) fn redact_url(url: &str) -> String {
    redact_query(&redact_userinfo(url))
}

fn redact_userinfo(url: &str) -> String {
    // After the scheme and its slashes, however many were typed (`redis:/:pw@h/` does not
    // parse, and its error quotes it).
    let Some(colon) = url.find(':') else {
        return url.to_owned();
    };
    let slashes = url[colon + 1..].len() - url[colon + 1..].trim_start_matches('/').len();
    let start = colon + 1 + slashes;
    let rest = &url[start..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let at = match rest[..authority_end].rfind('@') {
        Some(at) => at,
        // No `@` in the authority, but one later after a `user:` part: a password with a
        // character that ended the authority early. Everything up to the last `@` is hidden.
        None => match rest.rfind('@') {
            Some(at) if rest[..at].contains(':') => at,
            _ => return url.to_owned(),
        },
    };
    let userinfo = &rest[..at];
    let user = match userinfo.split_once(':') {
        Some((user, _)) if !user.contains(['/', '?', '#']) => user,
        _ => "",
    };
    format!("{}{user}:***{}", &url[..start], &rest[at..])
}

fn redact_query(url: &str) -> String {
    let Some(q) = url.find('?') else {
        return url.to_owned();
    };
    let end = url[q..].find('#').map_or(url.len(), |i| q + i);
    let pairs: Vec<String> = url[q + 1..end]
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((k, _))
                if k.eq_ignore_ascii_case("pass") || k.eq_ignore_ascii_case("password") =>
            {
                format!("{k}=***")
            }
            _ => pair.to_owned(),
        })
        .collect();
    format!("{}?{}{}", &url[..q], pairs.join("&"), &url[end..])
}

#[cfg(test)]
mod tests {
    use super::redact_url;

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(
            redact_url("redis://127.0.0.1:6379/0"),
            "redis://127.0.0.1:6379/0"
        );
        assert_eq!(redact_url("redis://:hunter2@h:1/"), "redis://:***@h:1/");
        assert_eq!(redact_url("rediss://bob:hunter2@h/"), "rediss://bob:***@h/");
        assert_eq!(redact_url("redis://hunter2@h/"), "redis://:***@h/");
        assert!(!redact_url("redis://u:p@ss@h/").contains("p@ss"));
    }

    #[test]
    fn passwords_that_end_the_authority_early_or_sit_in_the_query_are_redacted() {
        for (url, secret) in [
            ("redis://:pa/ss@127.0.0.1:6379/", "pa/ss"),
            ("redis://:p#ss@127.0.0.1:6379/", "p#ss"),
            ("redis://bob:p?ss@h:notaport/", "p?ss"),
            ("redis+unix:///tmp/x.sock?pass=hunter2pw", "hunter2pw"),
            (
                "unix:///tmp/x.sock?db=1&pass=hunter2pw&user=bob",
                "hunter2pw",
            ),
            (
                "redis+unix:///tmp/x.sock?PASSWORD=hunter2pw#frag",
                "hunter2pw",
            ),
            ("redis:/:hunter2pw@127.0.0.1:notaport/", "hunter2pw"),
            ("redis::hunter2pw@127.0.0.1/", "hunter2pw"),
        ] {
            let shown = redact_url(url);
            assert!(!shown.contains(secret), "{url} -> {shown}");
            assert!(shown.contains("***"), "{url} -> {shown}");
        }
        assert_eq!(
            redact_url("redis://bob:p?ss@h:notaport/"),
            "redis://bob:***@h:notaport/"
        );
        assert_eq!(
            redact_url("unix:///tmp/x.sock?db=1&pass=s3&user=bob"),
            "unix:///tmp/x.sock?db=1&pass=***&user=bob"
        );
        // Nothing secret: unchanged.
        for url in [
            "redis+unix:///tmp/x.sock?db=2",
            "redis://h:1/?protocol=resp3",
            "redis+unix:///tmp/x.sock?user=a@b",
        ] {
            assert_eq!(redact_url(url), url);
        }
    }
}
