//! The verb the Kubernetes API server's authorizer names for a request
//! (k8s.io/apiserver `endpoints/request/requestinfo.go`). kube-sim records
//! and authorizes requests by it; the manager labels its client metrics with
//! it, so both sides of a request name it the same way.

use http::Method;

/// What a request addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// `/version`, `/healthz`, `/openapi/v3`...: not an API resource.
    NonResource,
    /// A resource collection (`/api/v1/namespaces/ns/pods`).
    Collection,
    /// One named object or its subresource (`.../pods/web`, `.../pods/web/status`).
    Named,
}

/// The verb: for a resource, GET is `list` on a collection, `get` on a
/// named object and `watch` with `watch=true` or a `/watch/` path; POST
/// `create`, PUT `update`, PATCH `patch`, DELETE `delete` (`deletecollection`
/// on a collection). A non-resource request's verb is its method in lower
/// case. `None`: a method the API server gives no verb.
pub fn verb(method: &Method, target: Target, watch: bool) -> Option<&'static str> {
    let named = target == Target::Named;
    if target == Target::NonResource {
        return Some(match *method {
            Method::GET => "get",
            Method::HEAD => "head",
            Method::POST => "post",
            Method::PUT => "put",
            Method::PATCH => "patch",
            Method::DELETE => "delete",
            Method::OPTIONS => "options",
            _ => return None,
        });
    }
    Some(match *method {
        Method::GET | Method::HEAD if watch => "watch",
        Method::GET | Method::HEAD if named => "get",
        Method::GET | Method::HEAD => "list",
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE if named => "delete",
        Method::DELETE => "deletecollection",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verbs_as_the_authorizer_names_them() {
        use Target::*;
        let cases = [
            (Method::GET, Collection, false, Some("list")),
            (Method::GET, Collection, true, Some("watch")),
            (Method::GET, Named, true, Some("watch")),
            (Method::GET, Named, false, Some("get")),
            (Method::HEAD, Named, false, Some("get")),
            (Method::POST, Collection, false, Some("create")),
            (Method::PUT, Named, false, Some("update")),
            (Method::PATCH, Named, false, Some("patch")),
            (Method::DELETE, Named, false, Some("delete")),
            (Method::DELETE, Collection, false, Some("deletecollection")),
            (Method::GET, NonResource, false, Some("get")),
            (Method::POST, NonResource, false, Some("post")),
            (Method::TRACE, Named, false, None),
        ];
        for (m, t, w, want) in cases {
            assert_eq!(verb(&m, t, w), want, "{m} {t:?} watch={w}");
        }
    }
}
