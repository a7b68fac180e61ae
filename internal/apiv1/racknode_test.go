package apiv1_test

import "testing"

// TestOpenAPIRackNodesCarryTheirGPUs checks that the document shows each
// node of a rack with its used and free GPUs, which say why a job asking for
// more GPUs than any one node has free waits.
func TestOpenAPIRackNodesCarryTheirGPUs(t *testing.T) {
	schemas := document(t)["components"].(map[string]any)["schemas"].(map[string]any)
	rack := schemas["Rack"].(map[string]any)["properties"].(map[string]any)
	items, _ := rack["nodes"].(map[string]any)["items"].(map[string]any)
	if items["$ref"] != "#/components/schemas/Node" {
		t.Fatalf("Rack.nodes = %v, want an array of Node", rack["nodes"])
	}
	node := schemas["Node"].(map[string]any)
	props := node["properties"].(map[string]any)
	for name, typ := range map[string]string{"gpus": "integer", "usedGpus": "integer", "freeGpus": "integer", "schedulable": "boolean", "ready": "boolean"} {
		if p, ok := props[name].(map[string]any); !ok || p["type"] != typ {
			t.Errorf("Node.%s = %v, want %s", name, props[name], typ)
		}
	}
}
