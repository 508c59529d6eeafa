//! Content negotiation for the response (`Accept`) as the apiserver's
//! negotiation package does it for the media types kube-sim can produce:
//! JSON, `as=Table`, `as=PartialObjectMetadata[List]` and aggregated
//! discovery.

/// What the client asked the response to be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Want {
    Json,
    Table,
    PartialMetadata,
    /// Aggregated discovery, with the apidiscovery version (`v2`/`v2beta1`).
    Discovery(String),
}

struct MediaRange<'a> {
    ty: &'a str,
    params: Vec<(&'a str, &'a str)>,
}

fn parse(accept: &str) -> Vec<MediaRange<'_>> {
    accept
        .split(',')
        .filter_map(|part| {
            let mut it = part.split(';');
            let ty = it.next()?.trim();
            if ty.is_empty() {
                return None;
            }
            let params = it
                .filter_map(|p| {
                    let (k, v) = p.split_once('=')?;
                    Some((k.trim(), v.trim().trim_matches('"')))
                })
                .collect();
            Some(MediaRange { ty, params })
        })
        .collect()
}

/// The media type of a `Content-Type`: lower-case, without parameters
/// (`; charset=utf-8`), as upstream's content negotiation reads it.
pub(crate) fn media_type(ct: &str) -> String {
    ct.split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase()
}

/// Picks the first acceptable media range, in the client's order.
/// `None`: nothing kube-sim can produce (answer 406).
pub fn negotiate(accept: Option<&str>, discovery_endpoint: bool) -> Option<Want> {
    let accept = match accept {
        Some(a) if !a.trim().is_empty() => a,
        _ => return Some(Want::Json),
    };
    for mr in parse(accept) {
        let json_like = matches!(mr.ty, "application/json" | "*/*" | "application/*");
        if !json_like {
            continue;
        }
        let get = |k: &str| mr.params.iter().find(|(pk, _)| *pk == k).map(|(_, v)| *v);
        match get("as") {
            None => return Some(Want::Json),
            Some("Table") if get("g") == Some("meta.k8s.io") => return Some(Want::Table),
            Some("PartialObjectMetadata" | "PartialObjectMetadataList")
                if get("g") == Some("meta.k8s.io") && get("v") == Some("v1") =>
            {
                return Some(Want::PartialMetadata);
            }
            Some("APIGroupDiscoveryList")
                if discovery_endpoint && get("g") == Some("apidiscovery.k8s.io") =>
            {
                let v = get("v").unwrap_or("v2");
                if v == "v2" || v == "v2beta1" {
                    return Some(Want::Discovery(v.to_string()));
                }
            }
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubectl_get_asks_for_table_first() {
        let a = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
        assert_eq!(negotiate(Some(a), false), Some(Want::Table));
    }

    #[test]
    fn protobuf_first_falls_back_to_json() {
        let a = "application/vnd.kubernetes.protobuf;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json";
        assert_eq!(negotiate(Some(a), true), Some(Want::Discovery("v2".into())));
        assert_eq!(negotiate(Some(a), false), Some(Want::Json));
    }

    #[test]
    fn protobuf_only_is_not_acceptable() {
        assert_eq!(
            negotiate(Some("application/vnd.kubernetes.protobuf"), false),
            None
        );
        assert_eq!(negotiate(None, false), Some(Want::Json));
    }
}
