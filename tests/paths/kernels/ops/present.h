// present
