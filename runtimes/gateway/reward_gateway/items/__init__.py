"""What an item is: each model kind's call and reward, the request bodies, per-item outcomes and the errors a
client sees."""
