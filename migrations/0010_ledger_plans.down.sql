ALTER FUNCTION effect_update() RESET enable_seqscan;
