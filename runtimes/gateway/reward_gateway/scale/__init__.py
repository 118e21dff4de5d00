"""KEDA's external scaler, served by the gateway: the predictor wakes and scales on what the gateway has in flight."""
