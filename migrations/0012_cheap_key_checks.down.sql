ALTER TABLE effect
    DROP CONSTRAINT effect_key_check,
    ADD CONSTRAINT effect_key_check CHECK (key ~ '^v1:[0-9a-f]{64}$');
ALTER TABLE effect_bump
    DROP CONSTRAINT effect_bump_key_check,
    ADD CONSTRAINT effect_bump_key_check CHECK (key ~ '^v1:[0-9a-f]{64}$');
ALTER TABLE target
    DROP CONSTRAINT target_key_check,
    ADD CONSTRAINT target_key_check CHECK (key ~ '^v1:[0-9a-f]{64}$');
