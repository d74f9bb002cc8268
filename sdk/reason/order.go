package reason

import "fmt"

// ListOrder is a listing's direction by start time, as the API's order parameter, the store
// and the SDK spell it.
type ListOrder string

// The list orders.
const (
	OrderDesc ListOrder = "desc" // newest first, the default
	OrderAsc  ListOrder = "asc"  // oldest first
)

func (o ListOrder) String() string {
	if o == "" {
		return string(OrderDesc)
	}
	return string(o)
}

// ParseListOrder reads "asc" or "desc" ("" is desc); anything else is an error.
func ParseListOrder(s string) (ListOrder, error) {
	switch o := ListOrder(s); o {
	case "":
		return OrderDesc, nil
	case OrderAsc, OrderDesc:
		return o, nil
	}
	return "", fmt.Errorf("list order %q is not asc or desc", s)
}
