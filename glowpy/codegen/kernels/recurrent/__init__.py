"""Recurrent layers: the RecurrentCell kernel (LSTM, GRU, RNN after lower_recurrent)."""
