-- confirm-stock turns a reservation into a sale: state 'sold'.
ALTER TABLE {{schema}}.reservations DROP CONSTRAINT reservations_state_check;
ALTER TABLE {{schema}}.reservations ADD CONSTRAINT reservations_state_check
    CHECK (state IN ('reserved', 'released', 'sold'));
