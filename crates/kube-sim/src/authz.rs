//! Authorization of every request, as kube-apiserver's
//! `--authorization-mode=Node,RBAC` authorizes it (opt-in:
//! [`Authorization::NodeRbac`]).
//!
//! The request's attributes are read from its path, method and query as
//! upstream's `RequestInfoFactory` reads them (k8s.io/apiserver
//! endpoints/request/requestinfo.go), before kube-sim looks the resource up:
//! a user who may not list `foos` is told so whether `foos` exists or not.
//! Impersonation (`Impersonate-User`, `Impersonate-Group`,
//! `Impersonate-Uid`, `Impersonate-Extra-<key>`) is authorized first, as
//! 1.36's constrained impersonation does (the `impersonate-on:<mode>:<verb>`
//! and `impersonate:<mode>` verbs, then the legacy `impersonate` on
//! `users`, `serviceaccounts` and `groups`; both on `uids` and
//! `userextras/<key>`: endpoints/filters/impersonation), and the request
//! is then authorized for the impersonated user.
//!
//! The decision is the review APIs' ([`crate::reviews::authorize`]):
//! `system:masters`, then the Node authorizer, then RBAC over the stored
//! objects. A refusal is upstream's 403 (`responsewriters.Forbidden`).

use http::Method;
use std::sync::Arc;

use crate::error::{ApiError, GroupResource};
use crate::http::State;
use crate::reviews::{Attributes, ResourceAttrs};

/// How kube-sim authorizes requests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Authorization {
    /// Every request is allowed, whoever sends it (kube-sim's historical
    /// behaviour; a kube-apiserver with `--authorization-mode=AlwaysAllow`).
    #[default]
    AlwaysAllow,
    /// As `--authorization-mode=Node,RBAC` (what the real control plane of
    /// the test bed runs): `system:masters` may do everything; a node
    /// (`system:node:<name>` in `system:nodes`) what the Node authorizer
    /// allows: the secrets, configmaps, volumes, claims and service
    /// accounts of the pods bound to it, its own Node, Lease and pods, and
    /// the rest of the static rules of the bootstrap ClusterRole
    /// `system:node` (upstream's graph of what runs on which node, which
    /// kube-sim computes from its store at each request); every user what
    /// RBAC allows. Anything else is 403 Forbidden.
    NodeRbac,
}

impl Authorization {
    /// The environment variable that sets the authorization of a kube-sim
    /// whose [`crate::SimConfig::authorization`] is `None`: `Node,RBAC` or
    /// `AlwaysAllow` (unset: `AlwaysAllow`). It lets a whole test suite run
    /// with authorization on.
    pub const ENV: &'static str = "KUBE_SIM_AUTHORIZATION";

    /// The mode `--authorization-mode` names (`Node,RBAC`, `AlwaysAllow`).
    pub fn parse(s: &str) -> Option<Authorization> {
        match s.trim() {
            "Node,RBAC" | "RBAC,Node" => Some(Authorization::NodeRbac),
            "AlwaysAllow" => Some(Authorization::AlwaysAllow),
            _ => None,
        }
    }

    /// The mode of the environment ([`Authorization::ENV`]); `Err` with the
    /// value when it names no mode.
    pub fn from_env() -> Result<Authorization, String> {
        match std::env::var(Self::ENV) {
            Err(_) => Ok(Authorization::AlwaysAllow),
            Ok(v) if v.is_empty() => Ok(Authorization::AlwaysAllow),
            Ok(v) => Authorization::parse(&v).ok_or(v),
        }
    }
}

/// A user and its groups.
pub(crate) type Identity = (String, Vec<String>);

/// The user a request acts as: its name and groups (what authorizes it),
/// and the UID and extra an impersonation gave it (`Impersonate-Uid`,
/// `Impersonate-Extra-<key>`; kube-sim's own tokens carry none).
#[derive(Debug, Clone, Default)]
pub(crate) struct Acting {
    pub(crate) id: Identity,
    pub(crate) uid: String,
    pub(crate) extra: std::collections::BTreeMap<String, Vec<String>>,
}

/// `url.PathUnescape` of an extra's key, the key as sent when it does not
/// decode (`unescapeExtraKey`).
fn unescape_extra_key(key: &str) -> String {
    let b = key.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = key
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok());
            match hex {
                Some(v) if key[i + 1..i + 3].bytes().all(|c| c.is_ascii_hexdigit()) => {
                    out.push(v);
                    i += 3;
                    continue;
                }
                _ => return key.to_string(),
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8(out).unwrap_or_else(|_| key.to_string())
}

/// Go's `%#v` of a `[]string`, or of its nil.
fn go_strings(v: &[String]) -> String {
    if v.is_empty() {
        return "[]string(nil)".to_string();
    }
    let items: Vec<String> = v.iter().map(|g| crate::goquote::quote(g)).collect();
    format!("[]string{{{}}}", items.join(", "))
}

/// `validateExtra` of constrained impersonation: the reason an extra may
/// not be impersonated in a constrained mode.
fn invalid_extra(extra: &std::collections::BTreeMap<String, Vec<String>>) -> Option<String> {
    for (key, values) in extra {
        if key.is_empty() {
            return Some("impersonating the empty string key in extra is not allowed".into());
        }
        // IsDomainPrefixedPath: `<DNS-1123 subdomain>/<non-empty path>`.
        let valid = key.split_once('/').is_some_and(|(host, path)| {
            !path.is_empty() && crate::validation::dns1123_subdomain(host).is_empty()
        });
        if !valid {
            return Some(format!(
                "impersonating an invalid key in extra is not allowed: extra.key: Invalid value: {}: must be a domain-prefixed path (such as \"acme.io/foo\")",
                crate::goquote::quote(key)
            ));
        }
        if values.iter().any(String::is_empty) {
            return Some("impersonating the empty string value in extra is not allowed".into());
        }
    }
    None
}

/// Go's `strconv.ParseBool`.
fn parse_bool(v: &str) -> Option<bool> {
    match v {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// `content.IsPathSegmentName`: a name that can be a path segment.
fn path_segment_name(name: &str) -> bool {
    name != "." && name != ".." && !name.contains('/') && !name.contains('%')
}

/// The name an exact `metadata.name` field selector requires
/// (`fields.Selector.RequiresExactMatch("metadata.name")` of the parsed,
/// unescaped selector; none when it does not parse).
fn selected_name(selector: &str) -> Option<String> {
    crate::selector::parse_field_terms(selector)
        .ok()?
        .into_iter()
        .find(|(f, eq, _)| *eq && f == "metadata.name")
        .map(|(_, _, v)| v)
}

/// The attributes of a request (`RequestInfoFactory.NewRequestInfo`): a
/// resource request under `/api/v1/...` or `/apis/<group>/<version>/...`,
/// anything shorter or elsewhere a non-resource request whose verb is the
/// method in lower case.
pub(crate) fn request_attributes(method: &Method, path: &str, query: Option<&str>) -> Attributes {
    let non_resource = Attributes {
        verb: method.as_str().to_ascii_lowercase(),
        resource: None,
        path: path.to_string(),
    };
    let trimmed = path.trim_matches('/');
    let parts: Vec<&str> = if trimmed.is_empty() {
        Vec::new()
    } else {
        trimmed.split('/').collect()
    };
    let (group, rest) = match parts.as_slice() {
        ["api", rest @ ..] if rest.len() >= 2 => ("", rest),
        ["apis", g, rest @ ..] if rest.len() >= 2 => (*g, rest),
        _ => return non_resource,
    };
    let mut rest = &rest[1..];
    let mut verb = match *method {
        Method::POST => "create",
        Method::GET | Method::HEAD => "get",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE => "delete",
        _ => "",
    };
    let via_watch_path = rest.first() == Some(&"watch");
    if matches!(rest.first(), Some(&("watch" | "proxy"))) {
        verb = if rest[0] == "watch" { "watch" } else { "proxy" };
        rest = &rest[1..];
    }
    let mut namespace = "";
    if rest.first() == Some(&"namespaces")
        && let Some(ns) = rest.get(1)
    {
        namespace = *ns;
        if rest.len() > 2 && !matches!(rest[2], "status" | "finalize") {
            rest = &rest[2..];
        }
    }
    let mut r = ResourceAttrs {
        namespace: namespace.to_string(),
        group: group.to_string(),
        resource: rest.first().map(|s| s.to_string()).unwrap_or_default(),
        subresource: String::new(),
        name: rest.get(1).map(|s| s.to_string()).unwrap_or_default(),
        field_selector: Vec::new(),
    };
    if rest.len() >= 3 && verb != "proxy" {
        r.subresource = rest[2].to_string();
    }
    let mut verb = verb.to_string();
    if r.name.is_empty() && verb == "get" {
        let q: Vec<(String, String)> = form_urlencoded::parse(query.unwrap_or("").as_bytes())
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect();
        let first = |k: &str| q.iter().find(|(qk, _)| qk == k).map(|(_, v)| v.as_str());
        // A `watch` that does not parse fails the whole decoding: the
        // selector is then ignored and any value but false/0 watches.
        let (watch, decoded) = match first("watch") {
            None => (false, true),
            Some(v) => match parse_bool(v) {
                Some(b) => (b, true),
                None => (
                    !matches!(v.to_ascii_lowercase().as_str(), "false" | "0"),
                    false,
                ),
            },
        };
        verb = (if watch { "watch" } else { "list" }).to_string();
        if decoded
            && let Some(name) = first("fieldSelector").and_then(selected_name)
            && path_segment_name(&name)
        {
            r.name = name;
        }
    }
    if r.name.is_empty() && verb == "delete" {
        verb = "deletecollection".to_string();
    }
    // With AuthorizeWithSelectors (GA): the first `fieldSelector` of a
    // list, watch or deletecollection (not of a `/watch/` path), read
    // straight from the query; the authorizer sees its requirements when
    // it parses (`GetAuthorizerAttributes`).
    if !via_watch_path && matches!(verb.as_str(), "list" | "watch" | "deletecollection") {
        r.field_selector = form_urlencoded::parse(query.unwrap_or("").as_bytes())
            .find(|(k, _)| k == "fieldSelector")
            .and_then(|(_, v)| crate::reviews::parse_field_selector(&v))
            .unwrap_or_default();
    }
    Attributes {
        verb,
        resource: Some(r),
        path: path.to_string(),
    }
}

/// `responsewriters.ForbiddenStatusError`: the 403 for `user` denied
/// `attrs`, with the authorizer's reason.
pub(crate) fn forbidden(user: &str, attrs: &Attributes, reason: Option<&str>) -> ApiError {
    use crate::goquote::quote as q;
    let msg = match &attrs.resource {
        None => format!(
            "User {} cannot {} path {}",
            q(user),
            attrs.verb,
            q(&attrs.path)
        ),
        Some(r) => {
            let resource = if r.subresource.is_empty() {
                r.resource.clone()
            } else {
                format!("{}/{}", r.resource, r.subresource)
            };
            let scope = if r.namespace.is_empty() {
                "at the cluster scope".to_string()
            } else {
                format!("in the namespace {}", q(&r.namespace))
            };
            format!(
                "User {} cannot {} resource {} in API group {} {scope}",
                q(user),
                attrs.verb,
                q(&resource),
                q(&r.group)
            )
        }
    };
    let msg = msg
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;");
    let err = match reason.filter(|r| !r.is_empty()) {
        Some(reason) => format!("{msg}: {reason}"),
        None => msg,
    };
    // apierrors.NewForbidden(gr, name, err).
    let (group, resource, name) = match &attrs.resource {
        Some(r) => (r.group.as_str(), r.resource.as_str(), r.name.as_str()),
        None => ("", "", ""),
    };
    let gr = GroupResource::new(group, resource);
    let message = if group.is_empty() && resource.is_empty() {
        format!("forbidden: {err}")
    } else if name.is_empty() {
        format!("{gr} is forbidden: {err}")
    } else {
        format!("{gr} {} is forbidden: {err}", q(name))
    };
    let mut details = serde_json::Map::new();
    for (k, v) in [("name", name), ("group", group), ("kind", resource)] {
        if !v.is_empty() {
            details.insert(k.to_string(), serde_json::json!(v));
        }
    }
    ApiError::new(403, "Forbidden", message).with_details(serde_json::Value::Object(details))
}

/// The header values of `name`, in order.
fn header_values<'a>(headers: &'a http::HeaderMap, name: &str) -> Vec<&'a str> {
    headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect()
}

/// The user a request acts as once its impersonation headers are
/// authorized (endpoints/filters/impersonation, with 1.36's constrained
/// impersonation): `requester` itself without them. Else the modes are
/// tried in upstream's order, each only for the users it applies to:
/// `arbitrary-node` (a `system:node:<name>`, no groups), `serviceaccount`
/// (a `system:serviceaccount:<ns>:<name>`, no groups), `user-info` (any
/// other user), each needing `impersonate-on:<mode>:<verb>` on the request
/// and then `impersonate:<mode>` on the user (`nodes`, `serviceaccounts` or
/// `users`) and its groups; then the legacy `impersonate` verb. The first
/// mode that allows gives the user: its groups (a node's `system:nodes`, a
/// service account's own when none is given) and `system:authenticated`
/// (`system:unauthenticated` for `system:anonymous`). `Err`: the 403 of the
/// first mode that refused, or upstream's 400 for groups without a user.
pub(crate) fn acting_identity(
    state: &Arc<State>,
    headers: &http::HeaderMap,
    requester: &Identity,
    request: &Attributes,
) -> Result<Acting, ApiError> {
    let user = header_values(headers, "impersonate-user")
        .into_iter()
        .next()
        .filter(|u| !u.is_empty());
    let wanted_groups: Vec<String> = header_values(headers, "impersonate-group")
        .into_iter()
        .map(str::to_string)
        .collect();
    let uid = header_values(headers, "impersonate-uid")
        .into_iter()
        .next()
        .unwrap_or("")
        .to_string();
    let mut extra: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for name in headers.keys() {
        if let Some(key) = name.as_str().strip_prefix("impersonate-extra-") {
            let values = header_values(headers, name.as_str());
            extra
                .entry(unescape_extra_key(key))
                .or_default()
                .extend(values.into_iter().map(str::to_string));
        }
    }
    let Some(user) = user else {
        if !wanted_groups.is_empty() || !uid.is_empty() || !extra.is_empty() {
            // processImpersonationHeaders: the wanted user.DefaultInfo, %#v
            // (a map's keys sorted, as fmt prints them).
            let extra = if extra.is_empty() {
                "map[string][]string(nil)".to_string()
            } else {
                let items: Vec<String> = extra
                    .iter()
                    .map(|(k, v)| format!("{}:{}", crate::goquote::quote(k), go_strings(v)))
                    .collect();
                format!("map[string][]string{{{}}}", items.join(", "))
            };
            return Err(ApiError::bad_request(format!(
                "requested &user.DefaultInfo{{Name:\"\", UID:{}, Groups:{}, Extra:{extra}}} without impersonating a user name",
                crate::goquote::quote(&uid),
                go_strings(&wanted_groups)
            )));
        }
        return Ok(Acting {
            id: requester.clone(),
            ..Default::default()
        });
    };
    // isNodeUsername: the name must be a DNS subdomain.
    let node = user
        .strip_prefix("system:node:")
        .filter(|n| crate::validation::dns1123_subdomain(n).is_empty());
    let sa = user
        .strip_prefix("system:serviceaccount:")
        .and_then(|r| r.split_once(':'))
        .filter(|(ns, name)| !ns.is_empty() && !name.is_empty() && !name.contains(':'));
    // onlyUsernameSet: no groups, UID or extra.
    let only_user = wanted_groups.is_empty() && uid.is_empty() && extra.is_empty();
    let wanted = Wanted {
        user,
        node,
        sa,
        groups: &wanted_groups,
        uid: &uid,
        extra: &extra,
    };
    // allImpersonationModes, with whether each applies (the mode's filter;
    // associated-node never does here: no identity carries a node name).
    let modes = [
        ("arbitrary-node", only_user && node.is_some()),
        ("serviceaccount", only_user && sa.is_some()),
        ("user-info", node.is_none() && sa.is_none()),
        ("legacy", true),
    ];
    let attempt = |i: usize| -> Option<Result<Identity, ApiError>> {
        let (mode, applies) = modes[i];
        if !applies {
            return None;
        }
        if mode == "legacy" {
            return Some(impersonate(state, requester, "impersonate", false, &wanted));
        }
        let mut on = request.clone();
        on.verb = format!("impersonate-on:{mode}:{}", request.verb);
        let d = may(state, requester, &on);
        if !d.allowed {
            return Some(Err(forbidden(&requester.0, &on, d.reason.as_deref())));
        }
        let verb = format!("impersonate:{mode}");
        Some(impersonate(state, requester, &verb, true, &wanted))
    };
    // getImpersonatedUser: the mode that last succeeded for this requester
    // first, then every mode in order; the first error is the answer when
    // none succeeds. (So which groups a node gets depends on the requester's
    // history, as upstream: after a legacy success, legacy answers first.)
    let cached = state.impersonation_modes.get(&requester.0);
    let mut first_err = None;
    let order = cached
        .into_iter()
        .chain((0..modes.len()).filter(|i| Some(*i) != cached));
    for i in order {
        match attempt(i) {
            None => {}
            Some(Ok(identity)) => {
                if Some(i) != cached {
                    state.impersonation_modes.set(&requester.0, i);
                }
                return Ok(Acting {
                    id: identity,
                    uid: uid.clone(),
                    extra: extra.clone(),
                });
            }
            Some(Err(e)) => {
                first_err.get_or_insert(e);
            }
        }
    }
    Err(first_err.unwrap_or_else(|| ApiError::internal("all impersonation modes failed")))
}

/// Upstream's `modeIndexCache`: which impersonation mode last succeeded for
/// a requester (by user name), tried first next time. An LRU of 10,000
/// users upstream; here the whole map is dropped when it would outgrow
/// that, which only changes the order modes are tried in.
#[derive(Default)]
pub(crate) struct ModeIndexCache(parking_lot::Mutex<std::collections::HashMap<String, usize>>);

impl ModeIndexCache {
    const CAPACITY: usize = 10_000;

    fn get(&self, requester: &str) -> Option<usize> {
        self.0.lock().get(requester).copied()
    }

    fn set(&self, requester: &str, mode: usize) {
        let mut m = self.0.lock();
        if m.len() >= Self::CAPACITY && !m.contains_key(requester) {
            m.clear();
        }
        m.insert(requester.to_string(), mode);
    }
}

/// What an impersonation asks for (`processImpersonationHeaders`).
struct Wanted<'a> {
    user: &'a str,
    node: Option<&'a str>,
    sa: Option<(&'a str, &'a str)>,
    groups: &'a [String],
    uid: &'a str,
    extra: &'a std::collections::BTreeMap<String, Vec<String>>,
}

/// One impersonation mode's checks (`impersonationModeState.check`):
/// `verb` on the user (as `nodes` in a constrained mode, `serviceaccounts`,
/// or `users`; in `authentication.k8s.io` for a constrained mode, the core
/// group for the legacy one), on its UID (`uids`), on each group, and on
/// each extra value (`userextras/<key>`, both in `authentication.k8s.io`;
/// a constrained mode first refuses an extra `validateExtra` does not
/// accept); the identity it gives.
fn impersonate(
    state: &Arc<State>,
    requester: &Identity,
    verb: &str,
    constrained: bool,
    wanted: &Wanted,
) -> Result<Identity, ApiError> {
    let user = wanted.user;
    let wanted_groups = wanted.groups;
    let mut groups: Vec<String> = wanted_groups.to_vec();
    let (resource, namespace, name) = match (wanted.node, wanted.sa) {
        (Some(n), _) if constrained => {
            groups = vec!["system:nodes".to_string()];
            ("nodes", String::new(), n.to_string())
        }
        (_, Some((ns, sa_name))) => {
            if wanted_groups.is_empty() {
                groups = vec![
                    "system:serviceaccounts".to_string(),
                    format!("system:serviceaccounts:{ns}"),
                ];
            }
            ("serviceaccounts", ns.to_string(), sa_name.to_string())
        }
        _ => ("users", String::new(), user.to_string()),
    };
    const AUTHN: &str = "authentication.k8s.io";
    let user_group = if constrained { AUTHN } else { "" };
    let check = |group: &str, resource: &str, subresource: &str, namespace: String, name: &str| {
        Attributes {
            verb: verb.to_string(),
            resource: Some(ResourceAttrs {
                namespace,
                group: group.to_string(),
                resource: resource.to_string(),
                subresource: subresource.to_string(),
                name: name.to_string(),
                field_selector: Vec::new(),
            }),
            path: String::new(),
        }
    };
    let allowed = |attrs: Attributes| {
        let d = may(state, requester, &attrs);
        if d.allowed {
            Ok(())
        } else {
            Err(forbidden(&requester.0, &attrs, d.reason.as_deref()))
        }
    };
    let refused =
        |attrs: Attributes, reason: &str| Err(forbidden(&requester.0, &attrs, Some(reason)));
    // authorizeUsername, authorizeUID.
    allowed(check(user_group, resource, "", namespace, &name))?;
    if !wanted.uid.is_empty() {
        allowed(check(AUTHN, "uids", "", String::new(), wanted.uid))?;
    }
    // authorizeGroups: a constrained mode refuses the empty group and
    // system:masters, and lets one check of `*` stand for four or more.
    let group = |name: &str| check(user_group, "groups", "", String::new(), name);
    if constrained && wanted_groups.iter().any(String::is_empty) {
        return refused(
            group(""),
            "impersonating the empty string group is not allowed",
        );
    }
    if constrained && wanted_groups.iter().any(|g| g == "system:masters") {
        return refused(
            group("system:masters"),
            "impersonating the system:masters group is not allowed",
        );
    }
    let many_groups = constrained && wanted_groups.len() >= 4 && allowed(group("*")).is_ok();
    if !many_groups {
        for g in wanted_groups {
            allowed(group(g))?;
        }
    }
    // authorizeExtra: likewise `*/*` for four or more keys or values.
    if !wanted.extra.is_empty() {
        if constrained && let Some(reason) = invalid_extra(wanted.extra) {
            return refused(check(AUTHN, "userextras", "", String::new(), ""), &reason);
        }
        let values: usize = wanted.extra.values().map(Vec::len).sum();
        let large = wanted.extra.len() >= 4 || values >= 4;
        let many_extras = constrained
            && large
            && allowed(check(AUTHN, "userextras", "*", String::new(), "*")).is_ok();
        if !many_extras {
            for (key, values) in wanted.extra {
                for v in values {
                    allowed(check(AUTHN, "userextras", key, String::new(), v))?;
                }
            }
        }
    }
    if user == "system:anonymous" {
        if !groups.iter().any(|g| g == "system:unauthenticated") {
            groups.push("system:unauthenticated".to_string());
        }
    } else if !groups.iter().any(|g| g == "system:unauthenticated")
        && !groups.iter().any(|g| g == "system:authenticated")
    {
        groups.push("system:authenticated".to_string());
    }
    Ok((user.to_string(), groups))
}

/// The authorizer's decision on `attrs` for `requester`; every request is
/// allowed under `AlwaysAllow` (its impersonation too).
fn may(state: &Arc<State>, requester: &Identity, attrs: &Attributes) -> crate::reviews::Decision {
    if state.authorization == Authorization::AlwaysAllow {
        return crate::reviews::Decision {
            allowed: true,
            reason: None,
        };
    }
    crate::reviews::authorize(state, &requester.0, &requester.1, attrs)
}

/// Authorizes one request: its impersonation, then its attributes for the
/// user it acts as. `Ok`: that user (the one admission sees as
/// `request.userInfo`, as upstream's filters hand it on).
///
/// `path` is the request's unescaped path (Go's `URL.Path`), which the
/// request info resolver splits.
pub(crate) fn authorize_request(
    state: &Arc<State>,
    req: &http::Request<hyper::body::Incoming>,
    path: &str,
) -> Result<Acting, ApiError> {
    let requester = crate::self_review::requester(req);
    let attrs = request_attributes(req.method(), path, req.uri().query());
    let mut acting = acting_identity(state, req.headers(), &requester, &attrs)?;
    // The authenticator's extra (a client certificate's credential id) is
    // the requester's; an impersonated user has only the extra it asks for.
    if let Some(p) = req.extensions().get::<crate::tls::PeerCert>()
        && header_values(req.headers(), "impersonate-user").is_empty()
    {
        acting.extra.insert(
            crate::tls::CREDENTIAL_ID_KEY.to_string(),
            vec![p.credential_id.clone()],
        );
    }
    let d = may(state, &acting.id, &attrs);
    if d.allowed {
        Ok(acting)
    } else {
        Err(forbidden(&acting.id.0, &attrs, d.reason.as_deref()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attrs(method: Method, path: &str, query: Option<&str>) -> (String, Option<ResourceAttrs>) {
        let a = request_attributes(&method, path, query);
        (a.verb, a.resource)
    }

    #[test]
    fn request_attributes_are_read_as_upstream_reads_them() {
        let (verb, r) = attrs(Method::GET, "/api/v1/namespaces/shop/pods", None);
        let r = r.expect("a resource request");
        assert_eq!((verb.as_str(), r.namespace.as_str()), ("list", "shop"));
        assert_eq!((r.resource.as_str(), r.name.as_str()), ("pods", ""));

        let (verb, r) = attrs(
            Method::GET,
            "/api/v1/pods",
            Some("watch=1&fieldSelector=metadata.name%3Dweb"),
        );
        let r = r.expect("a resource request");
        assert_eq!((verb.as_str(), r.name.as_str()), ("watch", "web"));

        let (verb, r) = attrs(
            Method::PATCH,
            "/apis/apps/v1/namespaces/shop/deployments/web/status",
            None,
        );
        let r = r.expect("a resource request");
        assert_eq!(verb, "patch");
        assert_eq!(
            (r.group.as_str(), r.subresource.as_str(), r.name.as_str()),
            ("apps", "status", "web")
        );

        // A namespace is named by its own path, and is its own namespace.
        let (verb, r) = attrs(Method::DELETE, "/api/v1/namespaces/shop", None);
        let r = r.expect("a resource request");
        assert_eq!(verb, "delete");
        assert_eq!(
            (r.resource.as_str(), r.name.as_str(), r.namespace.as_str()),
            ("namespaces", "shop", "shop")
        );
        let (_, r) = attrs(Method::PUT, "/api/v1/namespaces/shop/finalize", None);
        let r = r.expect("a resource request");
        assert_eq!(
            (r.name.as_str(), r.subresource.as_str()),
            ("shop", "finalize")
        );

        let (verb, r) = attrs(Method::DELETE, "/api/v1/namespaces/shop/secrets", None);
        assert_eq!(verb, "deletecollection");
        assert!(r.is_some());
        let (verb, r) = attrs(Method::GET, "/api/v1/watch/namespaces/shop/pods/web", None);
        assert_eq!(
            (verb.as_str(), r.map(|r| r.name)),
            ("watch", Some("web".to_string()))
        );

        // Discovery is not a resource request: fewer than three parts
        // after `/api` or `/apis/<group>`.
        for p in [
            "/api",
            "/apis",
            "/api/v1",
            "/apis/apps",
            "/apis/apps/v1",
            "/version",
            "/healthz",
        ] {
            let (verb, r) = attrs(Method::GET, p, None);
            assert_eq!(verb, "get", "{p}");
            assert!(r.is_none(), "{p} is not a resource request");
        }
    }

    #[test]
    fn forbidden_names_what_was_refused() {
        let a = request_attributes(&Method::GET, "/api/v1/namespaces/shop/secrets/db", None);
        let e = forbidden("alice", &a, None);
        assert_eq!(e.code, 403);
        assert_eq!(
            e.message,
            "secrets \"db\" is forbidden: User \"alice\" cannot get resource \"secrets\" in API group \"\" in the namespace \"shop\""
        );
        let a = request_attributes(&Method::GET, "/metrics", None);
        let e = forbidden("system:anonymous", &a, Some("RBAC: role missing"));
        assert_eq!(
            e.message,
            "forbidden: User \"system:anonymous\" cannot get path \"/metrics\": RBAC: role missing"
        );
    }
}
