package v1alpha1

// NewAccountClaim is a claim named name in namespace with spec, apiVersion and kind set.
func NewAccountClaim(namespace, name string, spec AccountClaimSpec) *AccountClaim {
	c := &AccountClaim{Spec: spec}
	c.APIVersion = SchemeGroupVersion.String()
	c.Kind = "AccountClaim"
	c.Name = name
	c.Namespace = namespace
	return c
}

// ForCreate is what Create sends: the claim's name, labels, annotations and spec in
// namespace, with apiVersion and kind set and nothing the API server owns.
func (c *AccountClaim) ForCreate(namespace string) *AccountClaim {
	out := NewAccountClaim(namespace, c.Name, c.Spec)
	out.GenerateName = c.GenerateName
	out.Labels = copyMap(c.Labels)
	out.Annotations = copyMap(c.Annotations)
	return out
}

func copyMap(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// Condition returns the condition of type t, or nil.
func (s *AccountClaimStatus) Condition(t string) *AccountClaimStatusCondition {
	if s == nil {
		return nil
	}
	for i := range s.Conditions {
		if s.Conditions[i].Type == t {
			return &s.Conditions[i]
		}
	}
	return nil
}
