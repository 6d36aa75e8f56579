"""fairagg-flower-app: any fairagg rule as the strategy of a Flower App."""
