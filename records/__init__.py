"""Conversation recordings (SPEC REC): the recorder, sealed audio stores and their metadata."""
